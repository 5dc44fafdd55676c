"""The storage tests' database (each test runs on SQLite and on PostgreSQL) and a clock they move by hand."""

from __future__ import annotations

import pytest

from tests.clock import Clock
from tests.dbs import migrated


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    yield from migrated(request.param, tmp_path)


@pytest.fixture
def clock():
    return Clock()
