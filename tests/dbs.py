"""A migrated database per test, on SQLite or on the PostgreSQL server at 127.0.0.1:5432."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from db.session import make_engine, upgrade

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def migrated(kind: str, tmp_path: Path) -> Iterator[Engine]:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 't.db'}"
        upgrade(url)
        engine = make_engine(url)
        yield engine
        engine.dispose()
        return
    with empty_pg_database("tessera_t") as url:
        upgrade(url)
        engine = make_engine(url)
        try:
            yield engine
        finally:
            engine.dispose()


@contextlib.contextmanager
def empty_pg_database(prefix: str) -> Iterator[str]:
    """The URL of a new, empty database on the PostgreSQL server, dropped on exit."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        admin.dispose()
        pytest.fail(f"PostgreSQL at 127.0.0.1:5432 is required for this test: {exc}")
    try:
        yield PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()
