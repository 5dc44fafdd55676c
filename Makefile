# Tessera: `make run` serves the embedded default, `make test` runs the whole suite.
.PHONY: setup run test lint typecheck unit integration demo-models bench clean

VENV := .venv
PY := $(VENV)/bin/python

setup:
	@bash scripts/setup_venv.sh

run: setup
	$(VENV)/bin/tessera serve

demo-models: setup
	$(VENV)/bin/tessera models build-demo

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: setup
	$(VENV)/bin/mypy

test: setup lint typecheck
	$(PY) -m pytest tests -q

unit: setup
	$(PY) -m pytest tests/unit -q

integration: setup
	$(PY) -m pytest tests/integration -q

clean:
	rm -rf $(VENV) .tessera .pytest_cache .mypy_cache .ruff_cache
