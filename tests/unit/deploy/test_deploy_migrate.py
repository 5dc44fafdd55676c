"""deploy/migrate.py: replicas starting together migrate one database once."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
from sqlalchemy import create_engine, text

from tests.dbs import empty_pg_database
from tests.deploy_files import (
    DEPLOY,
)

# ---------------------------------------------------------------- deploy/migrate.py


def _migrate_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tessera_deploy_migrate", DEPLOY / "migrate.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def pg_url() -> Iterator[str]:
    with empty_pg_database("tessera_deploy") as url:
        yield url


def test_migrate_lets_replicas_starting_together_migrate_an_empty_database(pg_url):
    # Separate processes, as separate pods are: alembic keeps its migration context in a module global.
    env = {**os.environ, "TESSERA_DATABASE_URL": pg_url}
    procs = [
        subprocess.Popen(
            [sys.executable, str(DEPLOY / "migrate.py")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for _ in range(3)
    ]
    try:
        outputs = [proc.communicate(timeout=120)[0].decode() for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    assert [proc.returncode for proc in procs] == [0, 0, 0], outputs
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            versions = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
            tables = conn.execute(
                text("SELECT count(*) FROM pg_tables WHERE tablename = 'inference_requests'")
            ).scalar()
    finally:
        engine.dispose()
    assert len(versions) == 1
    assert tables == 1


def test_migrate_on_sqlite_needs_no_lock(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    _migrate_module().migrate(url)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
    finally:
        engine.dispose()
