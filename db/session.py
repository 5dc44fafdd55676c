"""Database engine creation and schema migration (Alembic), for SQLite and PostgreSQL alike."""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import Engine, create_engine, event

logger = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def _ensure_sqlite_dir(url: str) -> None:
    path = url.removeprefix("sqlite:///")
    if url.startswith("sqlite") and path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)


def make_engine(url: str) -> Engine:
    _ensure_sqlite_dir(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _pragmas(conn, _record):  # type: ignore[no-untyped-def]
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.close()

        return engine
    engine = create_engine(url, pool_pre_ping=True)

    @event.listens_for(engine, "connect")
    def _utc(conn, _record):  # type: ignore[no-untyped-def]
        # Sessions in UTC: day buckets and month starts are UTC days whatever the server's or client's zone
        # (PGTZ, the server's TimeZone).
        cur = conn.cursor()
        cur.execute("SET TIME ZONE 'UTC'")
        cur.close()
        conn.commit()

    return engine


def alembic_config(url: str):  # type: ignore[no-untyped-def]
    from alembic.config import Config

    cfg = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    _ensure_sqlite_dir(url)
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)
