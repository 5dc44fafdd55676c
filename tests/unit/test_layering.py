"""The package dependency direction of DESIGN.md: api, console -> serving, tenancy, billing -> db."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "db": {"api", "console", "serving", "tenancy", "billing"},
    "serving": {"api", "console", "tenancy", "billing"},
    "tenancy": {"api", "console"},
    "billing": {"api", "console", "serving"},
    "grounding": {"api", "console", "serving", "tenancy", "billing", "db"},
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


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_imports_against_the_direction(package):
    root = REPO / package
    if not root.is_dir():
        pytest.skip(f"{package}/ does not exist yet")
    offenders = {
        str(path.relative_to(REPO)): sorted(_imports(path) & FORBIDDEN[package]) for path in root.rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
