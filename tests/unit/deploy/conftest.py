"""The deployment files, loaded once per module."""

import pytest

from tests.deploy_files import COMPOSE, K8S, Doc, _load


@pytest.fixture(scope="module")
def k8s() -> list[Doc]:
    return [doc for path in sorted(K8S.rglob("*.y*ml")) for doc in _load(path)]


@pytest.fixture(scope="module")
def compose() -> Doc:
    (doc,) = _load(COMPOSE)
    return doc
