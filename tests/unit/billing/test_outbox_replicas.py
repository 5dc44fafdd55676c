"""The issue's acceptance: two gateway replicas drain a billing backlog through a Stripe outage, on PostgreSQL.

Each replica is an OutboxWorker with its own engine and its own event loop (its own thread), on one database.
The Stripe stand-in answers 500s (some saved under the idempotency key, as Stripe does once execution began) and
stalls past the client's timeout for a few seconds, then recovers. Every event must reach it exactly once.
"""

import asyncio
import random
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import Session

from billing import outbox
from billing.outbox_policy import OutboxPolicy
from billing.prices import DIMENSIONS
from billing.stripe_meters import EVENT_NAMES, StripeMeters
from billing.worker import OutboxWorker
from db.models import BillingOutbox, Tenant
from db.session import make_engine
from tests.dbs import migrated
from tests.fake_stripe import METER_EVENTS, FakeStripe

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")  # the SDK's httpx use

EVENTS, TENANTS = 400, 8
OUTAGE_S, FAULT_RATE = 3.0, 0.7
POLICY = OutboxPolicy(batch=50, concurrency=8, backoff_base_s=0.1, backoff_cap_s=1.0)


@pytest.fixture
def pg(tmp_path):
    yield from migrated("postgresql", tmp_path)


def _backlog(db):
    """EVENTS due rows over TENANTS tenants, one past Stripe's window and one Stripe refuses; returns the ids."""
    now = datetime.now(UTC)
    tenants = [Tenant(id=str(uuid.uuid4()), name=f"replica-tenant-{i}") for i in range(TENANTS)]
    rows = [
        BillingOutbox(
            identifier=f"chatcmpl-{uuid.uuid4().hex}:{DIMENSIONS[i % len(DIMENSIONS)]}",
            request_id=f"chatcmpl-{i}",
            tenant_id=tenants[i % TENANTS].id,
            dimension=DIMENSIONS[i % len(DIMENSIONS)],
            quantity=1 + i,
            created_at=now - timedelta(minutes=i),
            next_attempt_at=now,
        )
        for i in range(EVENTS + 2)
    ]
    rows[-2].created_at = now - timedelta(days=36)
    with Session(db, expire_on_commit=False) as s:
        s.add_all(tenants)
        s.commit()
        s.add_all(rows)
        s.commit()
    ids = [r.identifier for r in rows]
    return ids[:-2], ids[-2], ids[-1]


def _outage(fake):
    """From the first meter event on, for OUTAGE_S, FAULT_RATE of all requests fail: 500s, saved 500s (meter
    events) and timeouts. (Starting earlier, failures listing the meters would hold whole batches back, and the
    outage would be over before a meter event was ever refused.)"""
    window = []
    rng = random.Random(1)
    injected = defaultdict(int)

    def faults(path):  # called under the fake's lock
        if not window and path == METER_EVENTS:
            window.append(time.monotonic() + OUTAGE_S)
        if not window or time.monotonic() >= window[0] or rng.random() >= FAULT_RATE:
            return None
        # Customers keep one idempotency key for good (a new key could make a second customer), so a 500 saved
        # under it would hold that tenant's billing for Stripe's 24 h; this outage spares them that case.
        mode = rng.choice(("500", "500_saved", "timeout") if path == METER_EVENTS else ("500", "timeout"))
        injected[mode] += 1
        return mode

    fake.faults = faults
    return injected


def _replica(url, fake, name, deadline, sent_by, lock):
    async def main():
        engine = make_engine(url)
        meters = StripeMeters("sk_test_tessera", fake.url, timeout_s=2.0)
        worker = OutboxWorker(engine, meters, policy=POLICY, worker_id=name)

        def accepted(rows):
            with lock:
                sent_by[name].extend(r.identifier for r in rows)

        worker.after_send = accepted
        passes = 0
        try:
            while time.monotonic() < deadline:
                passes += 1
                if (await worker.run_once()).claimed == 0:
                    if (await asyncio.to_thread(worker.pending)) == 0:
                        return passes
                    await asyncio.sleep(0.05)
            return passes
        finally:
            await meters.aclose()
            engine.dispose()

    return asyncio.run(main())


def test_two_replicas_drain_a_backlog_through_an_outage_exactly_once(pg, record_property):
    live, old, refused = _backlog(pg)
    url = pg.url.render_as_string(hide_password=False)
    sent_by: dict[str, list[str]] = {"replica-a": [], "replica-b": []}
    lock = threading.Lock()
    with FakeStripe(stall_s=2.5) as fake:
        fake.refused[refused] = (400, "parameter_invalid_integer")
        injected = _outage(fake)
        started = time.monotonic()
        deadline = started + 120
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(_replica, url, fake, name, deadline, sent_by, lock) for name in sent_by]
            passes = [f.result() for f in futures]
        elapsed = time.monotonic() - started

    duplicates = (
        sum(n - 1 for n in fake.executions.values() if n > 1)
        + sum(fake.late_arrivals.values())
        + fake.conflicts[METER_EVENTS]
    )
    a, b = set(sent_by["replica-a"]), set(sent_by["replica-b"])
    with Session(pg) as s:
        attempts = sum(s.get(BillingOutbox, i).attempts for i in live)
    figures = {
        "events": len(live),
        "accepted_by_stripe": len(fake.events),
        "duplicates": duplicates,
        "replica_a_sent": len(a),
        "replica_b_sent": len(b),
        "passes": passes,
        "faults_injected": dict(injected),
        "send_attempts": attempts,
        "drain_s": round(elapsed, 2),
    }
    print(f"\ndrain figures: {figures}")
    for key, value in figures.items():
        record_property(key, value)

    assert sum(injected.values()) > 20  # the outage did bite
    assert attempts > len(live)
    # Zero losses, zero duplicates: every live event reached Stripe exactly once.
    assert outbox.counts(pg) == {"pending": 0, "sent": EVENTS, "dead": 2}
    assert set(fake.events) == set(live)
    assert all(fake.executions[i] == 1 for i in live)
    assert duplicates == 0
    # The replicas split the work and never both sent a row.
    assert a
    assert b
    assert not a & b
    assert a | b == set(live)
    # One customer per tenant and one meter per dimension, although both replicas raced to create them.
    assert len(fake.customers) == TENANTS
    assert len(fake.meters) == len(EVENT_NAMES)
    # The dead letters: the old event was never sent, the refused one was sent once and never retried.
    assert fake.keys_by_identifier[old] == []
    assert fake.executions[refused] == 1
    assert {d.identifier for d in outbox.dead_letters(pg)} == {old, refused}
