"""The outbox against the Stripe stand-in, on SQLite and PostgreSQL: dead letters, per-row backoff, idempotent
retries of meter events and customers, and leases."""

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry
from sqlmodel import Session

from billing import outbox
from billing.outbox_policy import OutboxPolicy, Verdict, as_utc
from billing.stripe_meters import StripeMeters
from billing.worker import OutboxWorker
from db.models import BillingOutbox, StripeCustomer
from tests.dbs import migrated
from tests.fake_stripe import METER_EVENTS, FakeStripe

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")  # the SDK's httpx use


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    yield from migrated(request.param, tmp_path)


def _rows(db, n=1, *, age=timedelta(minutes=1), tenant_id="tenant-a"):
    now = datetime.now(UTC)
    rows = [
        BillingOutbox(
            identifier=f"chatcmpl-{uuid.uuid4().hex}:text_input",
            request_id=f"chatcmpl-{i}",
            tenant_id=tenant_id,
            dimension="text_input",
            quantity=10 + i,
            created_at=now - age,
            next_attempt_at=now - age,
        )
        for i in range(n)
    ]
    with Session(db, expire_on_commit=False) as s:
        s.add_all(rows)
        s.commit()
    return [r.identifier for r in rows]


def _row(db, identifier):
    with Session(db) as s:
        return s.get(BillingOutbox, identifier)


def _first(path, mode):
    """A fault plan: the first request to `path` fails with `mode`, every other one is served."""
    left = [1]

    def faults(p):
        if p == path and left[0]:
            left[0] -= 1
            return mode
        return None

    return faults


async def _passes(worker, n, *, start=None, step=timedelta(minutes=10), until=None):
    """`n` passes, the clock moving past every backoff between them; with `until`, they stop once it holds, and
    whether it did is returned."""
    now = start or datetime.now(UTC)
    for _ in range(n):
        await worker.run_once(now=now)
        if until is not None and until():
            return True
        now += step
    return False


async def _passes_until_sent(worker, db, identifiers, *, limit=8):
    """Passes until every row is sent (at most `limit`). A loaded machine can stretch a setup call (the meters, a
    customer) past a short timeout: that pass retries too, and a later one goes on from there."""
    if not await _passes(worker, limit, until=lambda: all(_row(db, i).status == "sent" for i in identifiers)):
        raise AssertionError(f"not sent after {limit} passes: {[_row(db, i).status for i in identifiers]}")


def _meters_ready(fake):
    """The meters exist before a test's faults begin, created by a patient client."""
    asyncio.run(StripeMeters("sk_test_tessera", fake.url, timeout_s=30.0).ensure_meters())


def _worker(db, fake, timeout_s=5.0):
    return OutboxWorker(db, StripeMeters("sk_test_tessera", fake.url, timeout_s=timeout_s))


def test_dead_letters_are_kept_with_their_reason_and_never_retried(db):
    (old,) = _rows(db, age=timedelta(days=35, minutes=1))
    (refused,) = _rows(db)
    (fine,) = _rows(db)
    registry = CollectorRegistry()
    with FakeStripe() as fake:
        fake.refused[refused] = (400, "parameter_invalid_integer")
        worker = OutboxWorker(db, StripeMeters("sk_test_tessera", fake.url), registry=registry)
        asyncio.run(_passes(worker, 5))
    assert fake.keys_by_identifier[old] == []  # past the window: never sent at all
    assert len(fake.keys_by_identifier[refused]) == 1  # refused once, then left alone for four more passes
    assert list(fake.events) == [fine]
    dead = {d.identifier: d for d in outbox.dead_letters(db)}
    assert set(dead) == {old, refused}
    assert "35-day" in (dead[old].reason or "")
    assert "parameter_invalid_integer" in (dead[refused].reason or "")
    assert (dead[old].attempts, dead[refused].attempts) == (0, 1)
    assert outbox.counts(db) == {"pending": 0, "sent": 1, "dead": 2}
    assert _row(db, refused).claimed_by is None
    dead_lettered = "tessera_billing_events_dead_lettered_total"
    assert registry.get_sample_value(dead_lettered, {"reason": "expired"}) == 1
    assert registry.get_sample_value(dead_lettered, {"reason": "refused"}) == 1
    assert registry.get_sample_value("tessera_billing_events_sent_total") == 1


def test_retryable_failures_back_off_per_row_and_then_go_through(db):
    ids = _rows(db, 3)
    policy = OutboxPolicy(backoff_base_s=2.0, backoff_cap_s=10.0)
    with FakeStripe() as fake:
        worker = OutboxWorker(db, StripeMeters("sk_test_tessera", fake.url, timeout_s=5.0), policy=policy)
        fake.failing = True
        now = datetime.now(UTC)
        for attempt, ceiling in [(1, 2.0), (2, 4.0), (3, 8.0), (4, 10.0)]:
            result = asyncio.run(worker.run_once(now=now))
            assert (result.claimed, result.retried) == (3, 3)
            waits = [(as_utc(_row(db, i).next_attempt_at) - now).total_seconds() for i in ids]
            # + the pass's own time, which a loaded machine stretches
            assert all(ceiling / 2 <= w <= ceiling + 5 for w in waits), (attempt, waits)
            assert all(_row(db, i).attempts == attempt for i in ids)
            assert asyncio.run(worker.run_once(now=now + timedelta(seconds=ceiling / 2 - 0.01))).claimed == 0
            now += timedelta(seconds=max(waits))  # every row is due again: the jitter and the pass's time included
        fake.failing = False
        assert asyncio.run(worker.run_once(now=now)).sent == 3
    assert sorted(fake.events) == sorted(ids)
    assert all(_row(db, i).attempts == 5 and _row(db, i).status == "sent" for i in ids)


def test_a_lost_answer_is_retried_under_the_same_key_and_replayed(db):
    (identifier,) = _rows(db)
    with FakeStripe(stall_s=1.5) as fake:
        _meters_ready(fake)
        fake.faults = _first(METER_EVENTS, "lost")  # Stripe records the event; the answer never arrives
        asyncio.run(_passes_until_sent(_worker(db, fake, timeout_s=0.5), db, [identifier]))
    keys = fake.keys_by_identifier[identifier]
    assert len(keys) >= 2, keys  # retried
    assert set(keys) == {keys[0]}, keys  # under the one key
    assert fake.executions[identifier] == 1
    assert fake.replays >= len(keys) - 1 >= 1  # every retry got Stripe's saved answer
    assert _row(db, identifier).status == "sent"


def test_a_saved_500_is_retried_under_a_new_key(db):
    (identifier,) = _rows(db)
    with FakeStripe() as fake:
        # Stripe saves a 500 under its idempotency key once execution began: the same key would get it for 24 h.
        fake.faults = _first(METER_EVENTS, "500_saved")
        asyncio.run(_passes(_worker(db, fake), 2))
    first, second = fake.keys_by_identifier[identifier]
    assert first != second
    assert list(fake.events) == [identifier]
    row = _row(db, identifier)
    assert (row.status, row.key_generation, row.attempts) == ("sent", 1, 2)


def test_customer_creation_is_idempotent_under_a_retry(db):
    ids = _rows(db, 4, tenant_id="tenant-retry")
    with FakeStripe(stall_s=1.5) as fake:
        _meters_ready(fake)
        fake.faults = _first("/v1/customers", "lost")  # created at Stripe; the answer is lost
        worker = _worker(db, fake, timeout_s=0.5)
        asyncio.run(_passes(worker, 1))
        assert fake.events == {}  # nothing sent without a known customer
        asyncio.run(_passes_until_sent(worker, db, ids))
    assert len(fake.customers) == 1
    assert fake.replays >= 1
    with Session(db) as s:
        stored = s.get(StripeCustomer, "tenant-retry")
    assert stored is not None
    assert stored.customer_id == fake.customers[0]["id"]
    assert sorted(fake.events) == sorted(ids)
    assert {e["payload"]["stripe_customer_id"] for e in fake.events.values()} == {stored.customer_id}


def test_a_lapsed_lease_passes_the_row_on_and_the_late_worker_cannot_take_it_back(db):
    (identifier,) = _rows(db)
    policy = OutboxPolicy(lease_s=60)
    now = datetime.now(UTC)
    a = outbox.claim(db, "worker-a", now, policy)
    assert [r.identifier for r in a.rows] == [identifier]
    assert outbox.claim(db, "worker-b", now + timedelta(seconds=59), policy).rows == []  # leased to a
    b = outbox.claim(db, "worker-b", now + timedelta(seconds=61), policy)  # a died, or stalled
    assert [r.identifier for r in b.rows] == [identifier]
    outbox.settle(db, "worker-a", [outbox.Settlement(identifier, Verdict.DEAD, error="late")])
    outbox.settle(db, "worker-a", [outbox.Settlement(identifier, None)])
    row = _row(db, identifier)
    assert (row.status, row.claimed_by) == ("pending", "worker-b")
    outbox.settle(db, "worker-b", [outbox.Settlement(identifier, Verdict.SENT)])
    row = _row(db, identifier)
    assert (row.status, row.claimed_by, row.attempts) == ("sent", None, 1)
