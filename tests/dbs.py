"""A migrated database per test, on SQLite or on the PostgreSQL server at 127.0.0.1:5432."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

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
    name = f"tessera_t_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
    upgrade(url)
    engine = make_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()
