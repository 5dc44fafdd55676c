"""Every top-level package of the project is installed, type-checked and held to the deprecation rule: a package
added without its line in pyproject.toml would import here from the source tree and fail on a fresh install."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOT_SHIPPED = {"tests", "scripts", "static", "templates", "deploy", "docs"}


def _packages() -> set[str]:
    return {p.parent.name for p in REPO.glob("*/__init__.py")} - NOT_SHIPPED


def test_every_package_is_installed_typechecked_and_warned_about():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    found = {pattern.rstrip("*") for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert _packages() - found == set()
    assert _packages() - {"migrations"} - set(project["tool"]["mypy"]["packages"]) == set()
    filters = " ".join(project["tool"]["pytest"]["ini_options"]["filterwarnings"])
    assert [p for p in _packages() - {"migrations"} if f"DeprecationWarning:{p}(" not in filters] == []
    assert {"demo", "jobs", "storage", "tessera", "config"} <= _packages()
