"""The database that tenants, usage and billing share: opened, and migrated to the newest schema first."""

from __future__ import annotations

from sqlalchemy import Engine

from db.session import make_engine, upgrade


def open_database(url: str) -> Engine:
    """Apply any pending migrations, then return a connection pool. Blocking: call it off the event loop."""
    upgrade(url)
    return make_engine(url)
