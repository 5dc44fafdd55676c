"""Migrates the database once per rollout: replicas starting together wait on a PostgreSQL advisory lock.

Every gateway also upgrades at start-up (`tenancy.store.open_database`), but two replicas doing that at the same
moment on an empty database race to create the same tables. This runs first (a compose one-shot service, a
Kubernetes init container), under a lock, so the gateways' own upgrade finds the schema already at head.
Usage: `python deploy/migrate.py` with `TESSERA_DATABASE_URL` set (unset: the SQLite default, no lock).
"""

from __future__ import annotations

from sqlalchemy import create_engine, text

from config.settings import Settings
from db.session import upgrade

# Any bigint shared by every replica; advisory-lock keys are per database.
LOCK_KEY = 0x7E55E7A


def migrate(url: str) -> None:
    """Upgrade `url` to head; on PostgreSQL hold a session advisory lock while doing it."""
    if not url.startswith("postgresql"):
        upgrade(url)
        return
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": LOCK_KEY})
            try:
                upgrade(url)
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": LOCK_KEY})
    finally:
        engine.dispose()


def main() -> None:
    migrate(Settings().resolved_database_url())


if __name__ == "__main__":
    main()
