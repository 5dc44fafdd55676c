"""A batch line's usage row on SQLite and PostgreSQL: it is settled only with the line's result, in one transaction
(both or neither), at the model's batch share of the prices under the `batch_` meter dimensions; a line run again
after its gateway died takes its row over instead of adding a second; orphan settlement leaves it to its batch."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from sqlmodel import Session, select

from billing.prices import BATCH_PERCENT, PriceBook
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


def _line_caller(tenant: str, request_id: str) -> CallerIdentity:
    return CallerIdentity(tenant, "k", priority="batch", request_id=request_id)


def _opened(request_id: str, caller: CallerIdentity) -> OpenedRequest:
    return OpenedRequest(request_id, "small", frozenset({"text"}), caller, 40, 0, 0)


def _record(request_id: str, caller: CallerIdentity) -> CompletionRecord:
    return CompletionRecord(
        request_id=request_id,
        model="small",
        modalities=frozenset({"text"}),
        status="completed",
        finish_reason="stop",
        usage=TokenUsage(prompt=1000, completion=500, text=1000),
        caller=caller,
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


@pytest.fixture
def setup(db):
    tenant = Directory(db, "s").create_tenant(f"t-{time.monotonic_ns()}").id
    prices = PriceBook(db, cache_s=0)
    prices.set("small", "text_input", 1_000_000)  # 1.00 per 1M tokens
    prices.set("small", "output", 2_000_000)
    return tenant, prices, UsageJournal(db, prices, retry_delays_s=(0.01,))


def test_a_batch_line_is_billed_with_its_result_at_the_batch_share(db, setup):
    tenant, prices, journal = setup
    caller = _line_caller(tenant, "chatcmpl-line1")
    written: list[str] = []

    async def run() -> None:
        await journal.open(_opened("chatcmpl-line1", caller))
        await journal.close(_record("chatcmpl-line1", caller))

    asyncio.run(run())
    row, outbox = _rows(db, "chatcmpl-line1")
    assert (row.status, row.priority, outbox) == ("running", "batch", [])  # closed, but not settled without its line

    def write(s: Session) -> bool:
        written.append("line")
        return True

    assert journal.settle_batch_line("chatcmpl-line1", write) is True
    row, outbox = _rows(db, "chatcmpl-line1")
    assert row.status == "completed"
    # 1000 text tokens at 1.00/M plus 500 output at 2.00/M is 2000 micros; the batch pays half.
    assert row.cost_micros == 1000
    assert sorted((o.dimension, o.quantity) for o in outbox) == [("batch_output", 500), ("batch_text_input", 1000)]
    prices.set("small", BATCH_PERCENT, 20)
    assert prices.cost_micros(row) == 400
    interactive = InferenceRequest(**{**row.model_dump(), "priority": "interactive"})
    assert prices.cost_micros(interactive) == 2000


def test_a_line_whose_result_cannot_be_written_is_not_billed(db, setup):
    tenant, _, journal = setup
    caller = _line_caller(tenant, "chatcmpl-line2")

    async def run() -> None:
        await journal.open(_opened("chatcmpl-line2", caller))
        await journal.close(_record("chatcmpl-line2", caller))

    asyncio.run(run())

    def broken(s: Session) -> bool:
        s.add(BillingOutbox(identifier="x", request_id="chatcmpl-line2", tenant_id=tenant, dimension="d", quantity=1))
        raise RuntimeError("the database went away mid-transaction")

    with pytest.raises(RuntimeError):
        journal.settle_batch_line("chatcmpl-line2", broken)
    row, outbox = _rows(db, "chatcmpl-line2")
    assert (row.status, outbox) == ("running", [])  # neither the result nor the usage
    assert journal.settle_batch_line("chatcmpl-line2", lambda s: False) is False  # the line had a result already
    assert _rows(db, "chatcmpl-line2")[0].status == "running"


def test_a_line_run_again_takes_its_row_over_and_orphan_settlement_leaves_it_alone(db, setup):
    tenant, prices, dead = setup
    caller = _line_caller(tenant, "chatcmpl-line3")
    asyncio.run(dead.open(_opened("chatcmpl-line3", caller)))
    dead._register()
    old = utcnow() - timedelta(seconds=600)
    with Session(db) as s:
        instance = s.get(GatewayInstance, dead.instance_id)
        instance.heartbeat_at = old
        row = s.get(InferenceRequest, "chatcmpl-line3")
        row.created_at = old
        s.add_all([instance, row])
        s.commit()
    live = UsageJournal(db, prices, retry_delays_s=(0.01,), stale_s=5)
    assert live.settle_orphans() == 0  # the batch settles its own lines
    assert _rows(db, "chatcmpl-line3")[0].status == "running"

    async def again() -> None:
        await live.open(_opened("chatcmpl-line3", caller))
        await live.close(_record("chatcmpl-line3", caller))

    asyncio.run(again())
    assert _rows(db, "chatcmpl-line3")[0].owner == live.instance_id
    assert live.settle_batch_line("chatcmpl-line3", lambda s: True) is True
    row, outbox = _rows(db, "chatcmpl-line3")
    assert row.status == "completed"
    assert len(outbox) == 2
    with pytest.raises(Unavailable):  # a settled line never runs (or bills) again
        asyncio.run(live.open(_opened("chatcmpl-line3", caller)))


def test_rows_a_finished_batch_left_open_are_settled_as_interrupted(db, setup):
    tenant, _, journal = setup
    caller = _line_caller(tenant, "chatcmpl-line4")
    asyncio.run(journal.open(_opened("chatcmpl-line4", caller)))
    assert journal.settle_abandoned(["chatcmpl-line4", "chatcmpl-never-opened"]) == 1
    row, outbox = _rows(db, "chatcmpl-line4")
    assert row.status == "interrupted"
    assert [(o.dimension, o.quantity) for o in outbox] == [("batch_text_input", 40)]
    assert journal.settle_abandoned(["chatcmpl-line4"]) == 0
