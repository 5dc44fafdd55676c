# Tessera: `make run` serves the embedded default, `make test` runs the whole suite and every bench's --smoke.
.PHONY: setup run test lint typecheck unit integration test-families demo-models bench bench-smoke clean

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
	$(MAKE) --no-print-directory bench-smoke

unit: setup
	$(PY) -m pytest tests/unit -q

integration: setup
	$(PY) -m pytest tests/integration -q

# The family matrix: every adapted family in process and on a remote replica, gateway- and engine-encoded side by
# side (about 15 minutes on 2 cores); cells in artifacts/families-matrix.json, quoted by docs/families.md.
test-families: setup
	TESSERA_FAMILY_MATRIX=1 $(PY) -m pytest tests/integration/families -q

# Each bench once with tiny counts (every step, live server included), so a change that breaks a bench fails
# the build. One live server at a time; results in artifacts/bench-smoke/.
bench-smoke: setup
	$(VENV)/bin/tessera bench pipeline --smoke --json artifacts/bench-smoke/pipeline.json
	$(VENV)/bin/tessera bench latency --smoke --json artifacts/bench-smoke/latency.json
	$(VENV)/bin/tessera bench tenancy --smoke --json artifacts/bench-smoke/tenancy.json
	$(VENV)/bin/tessera bench structured --smoke --json artifacts/bench-smoke/structured.json
	$(VENV)/bin/tessera bench grounding --smoke --json artifacts/bench-smoke/grounding.json
	$(VENV)/bin/tessera bench batch --smoke --json artifacts/bench-smoke/batch.json
	$(VENV)/bin/tessera bench fleet --smoke --json artifacts/bench-smoke/fleet.json
	$(VENV)/bin/tessera bench load --smoke --json artifacts/bench-smoke/load.json
	$(VENV)/bin/tessera bench cost --smoke --json artifacts/bench-smoke/cost.json

# The full benches (about 3, 3, 1, 1, 9, 27, 13 and 13 minutes on 2 cores; fleet starts two vLLM replicas of its
# own, load one, cost one of each demo pool).
bench: setup
	$(VENV)/bin/tessera bench pipeline --json artifacts/bench_pipeline.json
	$(VENV)/bin/tessera bench latency --json artifacts/bench_latency.json
	$(VENV)/bin/tessera bench tenancy --json artifacts/bench_tenancy.json
	$(VENV)/bin/tessera bench structured --json artifacts/bench_structured.json
	$(VENV)/bin/tessera bench grounding --json artifacts/bench_grounding.json
	$(VENV)/bin/tessera bench batch --json artifacts/bench_batch.json
	$(VENV)/bin/tessera bench fleet --json artifacts/bench_fleet.json --plot artifacts/bench_fleet.png
	$(VENV)/bin/tessera bench load --json artifacts/bench_load.json --plot artifacts/bench_load.png
	$(VENV)/bin/tessera bench cost --json artifacts/bench_cost.json

clean:
	rm -rf $(VENV) .tessera .pytest_cache .mypy_cache .ruff_cache
