"""Migrations run upgrade -> downgrade -> upgrade on SQLite and PostgreSQL."""

import pytest
from sqlalchemy import create_engine, inspect

from db.session import downgrade, upgrade
from tests.dbs import empty_pg_database


def _tables(url):
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _indexes(url, table):
    engine = create_engine(url)
    try:
        return {ix["name"] for ix in inspect(engine).get_indexes(table)}
    finally:
        engine.dispose()


def _columns(url, table):
    engine = create_engine(url)
    try:
        return {c["name"] for c in inspect(engine).get_columns(table)}
    finally:
        engine.dispose()


def _roundtrip(url):
    upgrade(url)
    assert "inference_requests" in _tables(url)
    assert "last_used_at" not in _columns(url, "api_keys")
    downgrade(url, "0004")
    assert "last_used_at" in _columns(url, "api_keys")
    upgrade(url)
    assert "ix_inference_requests_tenant_created" in _indexes(url, "inference_requests")
    assert "ix_console_sessions_issued_at" in _indexes(url, "console_sessions")
    downgrade(url, "0005")
    assert "console_sessions" not in _tables(url)
    assert "api_keys" in _tables(url)
    upgrade(url)
    assert {"id_hash", "kind", "subject", "issued_at"} <= _columns(url, "console_sessions")
    downgrade(url, "base")
    assert "inference_requests" not in _tables(url)
    upgrade(url)
    assert "inference_requests" in _tables(url)


def test_sqlite_roundtrip(tmp_path):
    _roundtrip(f"sqlite:///{tmp_path / 'm.db'}")


@pytest.fixture
def pg_database():
    with empty_pg_database("tessera_mig") as url:
        yield url


def test_postgresql_roundtrip(pg_database):
    _roundtrip(pg_database)
