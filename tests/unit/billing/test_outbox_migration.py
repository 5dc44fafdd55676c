"""Migration 0007 (outbox leases, idempotency key generation, dead letters) up, down and up again, on SQLite and
PostgreSQL; a dead letter stays out of the pending set across a downgrade and keeps its reason."""

from datetime import UTC, datetime

import pytest
from sqlalchemy import create_engine, inspect, text

from db.session import downgrade, upgrade
from tests.dbs import migrated

NEW_COLUMNS = {"claimed_by", "claimed_until", "key_generation", "dead_at", "dead_reason"}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    for engine in migrated(request.param, tmp_path):
        yield engine.url.render_as_string(hide_password=False)


def _schema(url):
    engine = create_engine(url)
    try:
        found = inspect(engine)
        columns = {c["name"] for c in found.get_columns("billing_outbox")}
        return columns, {ix["name"] for ix in found.get_indexes("billing_outbox")}
    finally:
        engine.dispose()


def _execute(url, sql, **params):
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            result = conn.execute(text(sql), params)
            return result.all() if result.returns_rows else None
    finally:
        engine.dispose()


def test_roundtrip(url):
    columns, indexes = _schema(url)
    assert columns >= NEW_COLUMNS
    assert "ix_billing_outbox_due" in indexes
    assert "ix_billing_outbox_status" not in indexes
    now = datetime.now(UTC)
    _execute(
        url,
        "INSERT INTO billing_outbox (identifier, request_id, tenant_id, dimension, quantity, status, attempts,"
        " next_attempt_at, created_at, key_generation, dead_at, dead_reason)"
        " VALUES ('r:image', 'r', 't', 'image', 5, 'dead', 1, :now, :now, 0, :now, 'refused by Stripe: 400')",
        now=now,
    )

    downgrade(url, "0006")
    columns, indexes = _schema(url)
    assert not columns & NEW_COLUMNS
    assert "ix_billing_outbox_status" in indexes
    assert "ix_billing_outbox_due" not in indexes
    assert _execute(url, "SELECT status, last_error FROM billing_outbox") == [("dead", "refused by Stripe: 400")]

    upgrade(url)
    columns, indexes = _schema(url)
    assert columns >= NEW_COLUMNS
    assert "ix_billing_outbox_due" in indexes
    assert _execute(url, "SELECT status, key_generation, claimed_by FROM billing_outbox") == [("dead", 0, None)]
