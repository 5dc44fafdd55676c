"""Billing against a local Stripe-compatible server, driven by the real stripe SDK, on SQLite and PostgreSQL."""

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import stripe
from sqlmodel import Session, select

from billing.prices import DIMENSIONS, PriceBook, quantities
from billing.stripe_meters import EVENT_NAMES, StripeMeters
from billing.webhooks import receive
from billing.worker import OutboxWorker
from db.models import BillingOutbox, InferenceRequest, Tenant
from db.usage import record_usage
from tests.dbs import migrated
from tests.fake_stripe import FakeStripe

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")  # the SDK's httpx use


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    yield from migrated(request.param, tmp_path)


def _usage(db, prices, n=5, tenant_id=None):
    if tenant_id is None:
        tenant_id = str(uuid.uuid4())
        with Session(db) as s:
            s.add(Tenant(id=tenant_id, name=f"t-{tenant_id[:8]}"))
            s.commit()
    rows = []
    for i in range(n):
        row = InferenceRequest(
            request_id=f"chatcmpl-{uuid.uuid4().hex}",
            tenant_id=tenant_id,
            model_variant="small",
            modality_mask=3,
            text_tokens=30 + i,
            vision_tokens=54 * (i % 3),
            cached_image_tokens=54 if i % 3 == 2 else 0,
            audio_tokens=50 if i == 4 else 0,
            output_tokens=10 + i,
            status="completed",
        )
        row.cost_micros = prices.cost_micros(row)
        record_usage(db, row, prices.outbox_rows(row))
        rows.append(row)
    return rows


def _db_totals(rows):
    out = dict.fromkeys(DIMENSIONS, 0)
    for row in rows:
        for dim, n in quantities(row).items():
            out[dim] += n
    return {EVENT_NAMES[d]: n for d, n in out.items() if n}


def test_cost_is_prices_times_tokens_per_modality(db):
    prices = PriceBook(db)
    prices.set("small", "image", 1_000_000)  # 1.0 per 1M image tokens
    row = InferenceRequest(
        request_id="r",
        model_variant="small",
        modality_mask=3,
        text_tokens=1_000_000,
        vision_tokens=2_000_000,
        cached_image_tokens=500_000,
        output_tokens=0,
        status="completed",
    )
    q = quantities(row)
    assert q["image"] == 1_500_000
    assert q["cached_media"] == 500_000
    assert prices.cost_micros(row) == 150_000 + 1_500_000 + 15_000  # text + fresh image + cached media


async def _drain(worker, now=None):
    """Passes until one claims nothing; `now` (a callable) moves the clock past every backoff between passes."""
    while (await worker.run_once(now=now() if now else None)).claimed:
        pass


def test_events_total_equals_usage_total(db):
    prices = PriceBook(db)
    rows = _usage(db, prices)
    with FakeStripe() as fake:
        meters = StripeMeters("sk_test_tessera", fake.url)
        worker = OutboxWorker(db, meters)
        asyncio.run(_drain(worker))
        assert worker.pending() == 0
        assert fake.totals() == _db_totals(rows)
        assert len(fake.meters) == len(EVENT_NAMES)
        assert len(fake.customers) == 1


def test_crash_between_send_and_mark_sent_does_not_double_count(db):
    prices = PriceBook(db)
    rows = _usage(db, prices)
    with FakeStripe() as fake:
        worker = OutboxWorker(db, StripeMeters("sk_test_tessera", fake.url))

        def crash(_rows):
            raise SystemExit("the process died after Stripe accepted the events")

        worker.after_send = crash
        with pytest.raises(SystemExit):
            asyncio.run(worker.run_once())
        accepted = len(fake.events)
        assert accepted == sum(1 for r in rows for n in quantities(r).values() if n)  # all sent, none marked
        restarted = OutboxWorker(db, StripeMeters("sk_test_tessera", fake.url))
        # The dead worker's lease keeps its rows from everyone until it runs out...
        assert asyncio.run(restarted.run_once()).claimed == 0
        # ...and then they are resent under the same identifiers and idempotency keys: counted once.
        after_lease = datetime.now(UTC) + timedelta(minutes=3)
        asyncio.run(_drain(restarted, now=lambda: after_lease))
        assert restarted.pending() == 0
        assert fake.totals() == _db_totals(rows)
        assert fake.replays == accepted  # each resend was answered from Stripe's idempotency store
        assert all(n == 1 for n in fake.executions.values())


def test_stripe_outage_delays_billing_but_loses_nothing(db):
    prices = PriceBook(db)
    rows = _usage(db, prices)
    with FakeStripe() as fake:
        worker = OutboxWorker(db, StripeMeters("sk_test_tessera", fake.url))
        fake.failing = True
        first = asyncio.run(worker.run_once())
        assert (first.claimed, first.sent, first.retried) == (worker.pending(), 0, worker.pending())
        with Session(db) as s:
            pending = list(s.exec(select(BillingOutbox)))
        assert all(r.status == "pending" and r.attempts == 1 and r.claimed_by is None for r in pending)
        fake.failing = False
        later = datetime.now(UTC) + timedelta(minutes=10)  # past every backoff
        asyncio.run(_drain(worker, now=lambda: later))
        assert worker.pending() == 0
        assert fake.totals() == _db_totals(rows)


def test_webhook_signature_and_replay(db):
    secret = "whsec_test"
    payload = json.dumps({"id": "evt_1", "object": "event", "type": "invoice.paid", "data": {"object": {}}}).encode()
    timestamp = int(time.time())
    signed = f"{timestamp}.{payload.decode()}"
    signature = stripe.WebhookSignature._compute_signature(signed, secret)
    header = f"t={timestamp},v1={signature}"
    assert receive(db, payload, header, secret)[0] == "accepted"
    assert receive(db, payload, header, secret)[0] == "duplicate"
    with pytest.raises(ValueError, match="invalid Stripe webhook"):
        receive(db, payload, f"t={timestamp},v1={'0' * 64}", secret)


def test_cached_audio_features_are_billed_as_fresh_audio(db):
    """Only the log-mel features of a repeated clip were reused; the engine's audio tower still ran on them."""
    row = InferenceRequest(
        request_id="a",
        model_variant="large",
        modality_mask=5,
        text_tokens=10,
        audio_tokens=50,
        cached_audio_tokens=50,
        status="completed",
    )
    q = quantities(row)
    assert (q["audio"], q["cached_media"]) == (50, 0)


def test_a_transcription_is_billed_per_started_second_fresh_or_cached(db):
    prices = PriceBook(db)
    fresh = InferenceRequest(
        request_id="t1",
        model_variant="whisper",
        modality_mask=5,
        audio_tokens=126,
        output_tokens=40,
        audio_ms=2_510,
        endpoint="transcriptions",
        status="completed",
    )
    assert quantities(fresh) == {"audio_seconds": 3, "cached_audio_seconds": 0}  # tokens count against quotas only
    assert prices.cost_micros(fresh) == 300  # 3 s at 0.0001 a second
    cached = InferenceRequest(
        request_id="t2",
        model_variant="whisper",
        modality_mask=5,
        audio_tokens=126,
        audio_ms=2_510,
        cached_audio_ms=2_510,
        endpoint="transcriptions",
        status="completed",
    )
    assert quantities(cached) == {"audio_seconds": 0, "cached_audio_seconds": 3}
    assert prices.cost_micros(cached) == 30
    rows = prices.outbox_rows(cached.model_copy(update={"tenant_id": "t"}))
    assert [(r.dimension, r.quantity) for r in rows] == [("cached_audio_seconds", 3)]
    assert EVENT_NAMES["audio_seconds"] == "tessera_audio_seconds"
