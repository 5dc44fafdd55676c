"""The usage journal on SQLite and PostgreSQL: a request's row is opened before the engine and settled once,
through commit failures and delays; rows a dead gateway left running are settled as interrupted, once."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from sqlalchemy import event
from sqlmodel import Session, select

from billing.prices import PriceBook
from db.models import BillingOutbox, GatewayInstance, InferenceRequest, utcnow
from serving.errors import Unavailable
from serving.policy import CallerIdentity
from serving.record import CompletionRecord, OpenedRequest, TokenUsage
from tenancy.directory import Directory
from tenancy.usage_log import UsageJournal
from tests.dbs import migrated


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    yield from migrated(request.param, tmp_path)


def _tenant(db) -> str:
    return Directory(db, "s").create_tenant(f"t-{time.monotonic_ns()}").id


def _opened(request_id: str, tenant: str) -> OpenedRequest:
    return OpenedRequest(request_id, "small", frozenset({"text"}), CallerIdentity(tenant, "k"), 40, 0, 0)


def _record(request_id: str, tenant: str, completion: int = 12) -> CompletionRecord:
    return CompletionRecord(
        request_id=request_id,
        model="small",
        modalities=frozenset({"text"}),
        status="completed",
        finish_reason="stop",
        usage=TokenUsage(prompt=41, completion=completion, text=41),
        caller=CallerIdentity(tenant, "k"),
        answer="",
        audio=(),
        pre_engine_s=0.01,
        ttft_s=0.1,
        total_s=0.5,
        token_gaps=(),
    )


def _rows(db, request_id: str) -> tuple[InferenceRequest | None, list[BillingOutbox]]:
    with Session(db) as s:
        row = s.get(InferenceRequest, request_id)
        outbox = list(s.exec(select(BillingOutbox).where(BillingOutbox.request_id == request_id)))
    return row, outbox


def _journal(db, **kw) -> UsageJournal:
    return UsageJournal(db, PriceBook(db), retry_delays_s=(0.01, 0.02, 0.05, 0.1), **kw)


def test_a_request_is_running_until_settled_and_settled_once(db):
    tenant = _tenant(db)
    journal = _journal(db)

    async def run():
        await journal.open(_opened("r1", tenant))
        running, _ = _rows(db, "r1")
        await journal.close(_record("r1", tenant))
        await journal.close(_record("r1", tenant))  # a retry after a commit that landed
        return running

    running = asyncio.run(run())
    assert (running.status, running.text_tokens, running.owner) == ("running", 40, journal.instance_id)
    row, outbox = _rows(db, "r1")
    assert (row.status, row.text_tokens, row.output_tokens) == ("completed", 41, 12)
    assert sorted((o.dimension, o.quantity) for o in outbox) == [("output", 12), ("text_input", 41)]


def test_commit_failures_and_delays_are_retried_without_double_billing(db):
    """Two commits fail before they land (a locked or unreachable database), the third lands but its
    acknowledgement is lost, the fourth try is slow: the row is settled, its outbox rows are there once."""
    tenant = _tenant(db)
    journal = _journal(db)
    asyncio.run(journal.open(_opened("r2", tenant)))
    attempts = {"before": 0, "after": 0}

    def before_commit(session):
        if session.bind is not db and session.get_bind() is not db:
            return
        attempts["before"] += 1
        if attempts["before"] <= 2:
            raise RuntimeError("database is locked")
        time.sleep(0.2)

    def after_commit(session):
        if session.get_bind() is not db:
            return
        attempts["after"] += 1
        if attempts["after"] == 1:
            raise ConnectionError("connection lost after COMMIT was sent")

    event.listen(Session, "before_commit", before_commit)
    event.listen(Session, "after_commit", after_commit)
    try:
        asyncio.run(journal.close(_record("r2", tenant)))
    finally:
        event.remove(Session, "before_commit", before_commit)
        event.remove(Session, "after_commit", after_commit)
    assert attempts == {"before": 3, "after": 1}  # the fourth try found the row settled and committed nothing
    row, outbox = _rows(db, "r2")
    assert row.status == "completed"
    assert len(outbox) == 2
    assert journal._unsettled == {}


def test_a_close_that_runs_out_of_retries_is_kept_and_settled_later(db):
    tenant = _tenant(db)
    journal = _journal(db)
    asyncio.run(journal.open(_opened("r3", tenant)))

    def down(session):
        raise RuntimeError("connection refused")

    event.listen(Session, "before_commit", down)
    try:
        with pytest.raises(Unavailable) as unsettled:  # the API then ends the response with this error
            asyncio.run(journal.close(_record("r3", tenant)))
    finally:
        event.remove(Session, "before_commit", down)
    assert unsettled.value.code == "metering_unavailable"
    assert "r3" in journal._unsettled
    assert _rows(db, "r3")[0].status == "running"
    asyncio.run(journal.stop())  # what the heartbeat loop (or shutdown) does
    row, outbox = _rows(db, "r3")
    assert row.status == "completed"
    assert len(outbox) == 2


def test_rows_a_dead_gateway_left_running_are_settled_as_interrupted_once(db):
    tenant = _tenant(db)
    dead = _journal(db, stale_s=5)
    asyncio.run(dead.open(_opened("orphan", tenant)))
    asyncio.run(asyncio.to_thread(dead._register))
    live = _journal(db, stale_s=5)
    other = _journal(db, stale_s=5)
    assert live.settle_orphans() == 0  # its owner is alive (heartbeat fresh) and the row is new
    old = utcnow() - timedelta(seconds=60)
    with Session(db) as s:
        instance = s.get(GatewayInstance, dead.instance_id)
        instance.heartbeat_at = old
        row = s.get(InferenceRequest, "orphan")
        row.created_at = old
        s.add_all([instance, row])
        s.commit()
    assert live.settle_orphans() + other.settle_orphans() == 1
    row, outbox = _rows(db, "orphan")
    assert row.status == "interrupted"
    assert [(o.dimension, o.quantity) for o in outbox] == [("text_input", 40)]  # the prompt tokens known at open
    asyncio.run(dead.close(_record("orphan", tenant)))  # the owner comes back late: nothing changes
    assert _rows(db, "orphan")[0].status == "interrupted"
    assert len(_rows(db, "orphan")[1]) == 1


def test_a_request_that_cannot_be_journaled_is_refused_with_a_503(db):
    from serving.errors import ErrorKind

    tenant = _tenant(db)
    journal = _journal(db)

    def down(session):
        raise RuntimeError("connection refused")

    event.listen(Session, "before_commit", down)
    try:
        with pytest.raises(Unavailable) as refused:
            asyncio.run(journal.open(_opened("r4", tenant)))
    finally:
        event.remove(Session, "before_commit", down)
    assert refused.value.kind is ErrorKind.UNAVAILABLE
    assert refused.value.code == "metering_unavailable"
    assert _rows(db, "r4")[0] is None
