"""The package dependency direction of DESIGN.md: api, console -> serving, tenancy, billing, grounding -> db.

Serving defines the caller policy and the completion record; tenancy and grounding implement and subscribe to
them, so they may import serving, never the reverse. The HTTP surface reaches data only through the domain
packages, and nothing but the command line imports the benchmark harness."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "api": {"db", "bench"},
    "console": {"db", "bench"},
    "db": {"api", "console", "serving", "tenancy", "billing", "grounding", "bench"},
    "serving": {"api", "console", "tenancy", "billing", "grounding", "bench"},
    "tenancy": {"api", "console", "grounding", "bench"},
    "billing": {"api", "console", "serving", "tenancy", "grounding", "bench"},
    "grounding": {"api", "console", "tenancy", "billing", "bench"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


# The `tessera` command line dispatches `tessera bench` to the harness; nothing else in api/ may reach it.
ALLOWED = {"tessera/cli.py": {"bench"}}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_imports_against_the_direction(package):
    root = REPO / package
    if not root.is_dir():
        pytest.skip(f"{package}/ does not exist yet")
    offenders = {
        str(rel): sorted(_imports(path) & FORBIDDEN[package] - ALLOWED.get(str(rel), set()))
        for path in root.rglob("*.py")
        if (rel := path.relative_to(REPO))
    }
    assert {k: v for k, v in offenders.items() if v} == {}
