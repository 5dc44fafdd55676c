"""Keys, tenants, quotas and usage aggregates on SQLite and PostgreSQL."""

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import Session

from db.models import ApiKey, InferenceRequest
from serving.errors import Conflict, ErrorKind
from serving.record import TokenUsage
from tenancy.directory import Directory
from tenancy.limits import InProcessLimiter
from tenancy.metering import aggregate, receipt, spent_this_month
from tenancy.quotas import QuotaGate, cache_salt
from tests.dbs import migrated


def _tokens(n: int) -> TokenUsage:
    """A worst case (or a use) of `n` text prompt tokens."""
    return TokenUsage(prompt=n, text=n)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path, monkeypatch):
    # A client zone far from UTC: day buckets and month starts must still be UTC days.
    monkeypatch.setenv("PGTZ", "America/New_York")
    yield from migrated(request.param, tmp_path)


def test_keys_are_stored_hashed_and_resolve_to_their_tenant(db):
    d = Directory(db, "deployment-secret")
    acme = d.create_tenant("acme", tokens_per_minute=500)
    issued = d.issue_key(acme.id, allowed_models=["small"])
    with Session(db) as s:
        row = s.get(ApiKey, issued.key_id)
    assert issued.key not in (row.key_hash, row.prefix)
    assert row.key_hash == d.hash_key(issued.key)
    assert Directory(db, "another-deployment").resolve(issued.key) is None  # the secret is part of the hash
    p = d.resolve(issued.key)
    assert (p.tenant_name, p.quota.tokens_per_minute) == ("acme", 500)
    assert p.may_use("small")
    assert not p.may_use("large")
    assert d.resolve(issued.key + "x") is None
    d.revoke_key(issued.key_id)
    assert d.resolve(issued.key) is None
    expired = d.issue_key(acme.id, expires_at=datetime.now(UTC) - timedelta(seconds=1))
    assert d.resolve(expired.key) is None
    with pytest.raises(Conflict) as exc:
        d.create_tenant("acme")
    assert exc.value.kind is ErrorKind.CONFLICT


def test_usage_aggregates_stay_within_the_tenant(db):
    d = Directory(db, "s")
    a, b = d.create_tenant("a"), d.create_tenant("b")
    with Session(db) as s:
        for i, (tenant, model) in enumerate([(a, "small"), (a, "large"), (b, "small")]):
            s.add(
                InferenceRequest(
                    request_id=f"r{i}",
                    tenant_id=tenant.id,
                    model_variant=model,
                    modality_mask=3,
                    text_tokens=10,
                    vision_tokens=54,
                    output_tokens=5,
                    status="completed",
                    cost_micros=7,
                )
            )
        s.commit()
    now = datetime.now(UTC)
    window = (now - timedelta(days=1), now + timedelta(days=1))
    by_model = aggregate(db, a.id, *window, "model")
    assert [(r["model"], r["requests"]) for r in by_model] == [("large", 1), ("small", 1)]
    by_day = aggregate(db, a.id, *window, "day")
    assert by_day[0]["image_tokens"] == 108
    assert aggregate(db, b.id, *window, "modality")[4]["requests"] == 1
    assert receipt(db, a.id, "r2") is None  # b's request, asked for by a
    assert receipt(db, b.id, "r2")["tokens"]["image"] == 54
    assert spent_this_month(db, a.id) == (138, 14)


def test_budgets_refuse_before_the_engine(db):
    from serving.errors import QuotaExceeded

    d = Directory(db, "s")
    t = d.create_tenant("t", monthly_token_budget=100)
    key = d.issue_key(t.id).key
    gate = QuotaGate(InProcessLimiter(), db, budget_cache_s=0)

    async def run():
        hold = await gate.policy(d.resolve(key)).reserve("small", _tokens(60))
        assert hold.reservation is not None
        assert hold.limits["x-ratelimit-limit-requests"] == "16"
        await hold.settle(_tokens(60))
        await hold.settle(_tokens(60))  # a second settle is a no-op
        with Session(db) as s:
            s.add(
                InferenceRequest(
                    request_id="x",
                    tenant_id=t.id,
                    model_variant="small",
                    modality_mask=1,
                    text_tokens=50,
                    output_tokens=10,
                    status="completed",
                    cost_micros=5,
                )
            )
            s.commit()
        with pytest.raises(QuotaExceeded):
            await gate.policy(d.resolve(key)).reserve("small", _tokens(60))
        d.set_quota(t.id, monthly_token_budget=None, monthly_cost_budget_micros=5)
        with pytest.raises(QuotaExceeded, match="spending"):
            await gate.policy(d.resolve(key)).reserve("small", _tokens(1))

    asyncio.run(run())


def test_tenant_policy_checks_models_and_salts_per_tenant(db):
    from serving.errors import PermissionDenied, RateLimited

    d = Directory(db, "s")
    a, b = d.create_tenant("a", concurrency=1), d.create_tenant("b")
    narrow = d.resolve(d.issue_key(a.id, allowed_models=["small"]).key)
    wide = d.resolve(d.issue_key(a.id).key)
    other = d.resolve(d.issue_key(b.id).key)
    gate = QuotaGate(InProcessLimiter(), db)
    assert gate.policy(narrow).cache_salt == gate.policy(wide).cache_salt == cache_salt(wide)  # one tenant
    assert gate.policy(other).cache_salt != gate.policy(wide).cache_salt
    gate.policy(narrow).check_model("small")
    with pytest.raises(PermissionDenied) as exc:
        gate.policy(narrow).check_model("large")
    assert exc.value.code == "model_not_allowed"
    assert gate.policy(wide).identity.tenant_id == a.id

    async def run():
        hold = await gate.policy(wide).reserve("large", _tokens(10))
        with pytest.raises(RateLimited) as refused:
            await gate.policy(narrow).reserve("small", _tokens(10))  # one concurrent request for tenant a
        assert refused.value.retry_after_s is not None
        assert refused.value.limits["x-ratelimit-remaining-requests"] == "0"
        await hold.settle(_tokens(5))
        second = await gate.policy(narrow).reserve("small", _tokens(10))  # the slot came back
        await second.settle(_tokens(0))

    asyncio.run(run())


def _row(request_id, tenant, *, model="small", mask=1, status="completed", grounding=None, at=None, image=0):
    return InferenceRequest(
        request_id=request_id,
        tenant_id=tenant,
        model_variant=model,
        modality_mask=mask,
        text_tokens=10,
        vision_tokens=image,
        output_tokens=5,
        status=status,
        cost_micros=100,
        grounding_score=grounding,
        created_at=at or datetime.now(UTC),
    )


def test_request_log_filters_pages_newest_first_and_never_crosses_tenants(db):
    from tenancy.metering import month_by_tenant, requests_page

    now = datetime.now(UTC).replace(microsecond=0)
    with Session(db) as s:
        for i in range(7):
            s.add(_row(f"r{i}", "a", at=now - timedelta(minutes=i), mask=3 if i % 2 else 1, image=54 if i % 2 else 0))
        s.add(_row("r-aud", "a", mask=5, grounding=0.2, at=now - timedelta(hours=1)))
        s.add(_row("r-aud-ok", "a", mask=5, grounding=0.9, at=now - timedelta(hours=2)))
        s.add(_row("r-fail", "a", model="large", status="failed", at=now - timedelta(hours=3)))
        s.add(_row("b-secret", "b", at=now))
        s.commit()
    first, total, number = requests_page(db, "a", page=1, per_page=4)
    assert (total, number) == (10, 1)
    assert [r["request_id"] for r in first] == ["r0", "r1", "r2", "r3"]
    last, _, number = requests_page(db, "a", page=3, per_page=4)
    assert [r["request_id"] for r in last] == ["r-aud-ok", "r-fail"]
    assert requests_page(db, "a", page=10**20, per_page=4)[1:] == (10, 3)  # past the end: the last page
    assert requests_page(db, "a", page=-5, per_page=4)[2] == 1
    assert requests_page(db, "nobody", page=4)[1:] == (0, 1)
    assert requests_page(db, "a", mix="text+image")[1] == 3
    assert {r["modalities"] for r in requests_page(db, "a", mix="text+image")[0]} == {"text+image"}
    assert [r["request_id"] for r in requests_page(db, "a", grounding_below=0.5)[0]] == ["r-aud"]
    assert [r["request_id"] for r in requests_page(db, "a", model="large", status="failed")[0]] == ["r-fail"]
    assert requests_page(db, "a", model="large", status="completed")[1] == 0
    assert [r["request_id"] for r in requests_page(db, "b")[0]] == ["b-secret"]
    month = month_by_tenant(db)
    if now.day == 1 and now.hour < 4:
        pytest.skip("rows from before midnight fall in the previous month")
    assert month["a"]["requests"] == 10
    assert month["b"] == {"requests": 1, "tokens": 15, "cost_micros": 100}


def test_daily_usage_per_model_in_utc_days(db):
    day = datetime(2026, 3, 4, 12, tzinfo=UTC)
    with Session(db) as s:
        s.add(_row("x1", "a", at=day, image=54, mask=3))
        s.add(_row("x2", "a", at=day + timedelta(hours=1), model="large"))
        s.add(_row("x3", "a", at=day + timedelta(days=1)))
        s.add(_row("x4", "a", at=datetime(2026, 3, 5, 0, 30, tzinfo=UTC)))  # a UTC day, whatever the zone
        s.add(_row("x5", "a", at=datetime(2026, 3, 4, 23, 30, tzinfo=UTC), model="large"))
        s.commit()
    rows = aggregate(db, "a", day - timedelta(days=1), day + timedelta(days=3), "day_model")
    assert [(r["day"], r["model"], r["requests"], r["image_tokens"]) for r in rows] == [
        ("2026-03-04", "large", 2, 0),
        ("2026-03-04", "small", 1, 54),
        ("2026-03-05", "small", 2, 0),
    ]


def test_grounding_is_sliced_by_modality_mix(db):
    from tenancy.metering import grounding_by_mix

    now = datetime.now(UTC)
    with Session(db) as s:
        for i, (mask, score) in enumerate([(5, 0.9), (5, 0.3), (7, 0.2), (7, None), (1, None)]):
            s.add(_row(f"g{i}", "a", mask=mask, grounding=score, at=now))
        s.add(_row("g-b", "b", mask=5, grounding=0.0, at=now))
        s.commit()
    rows = grounding_by_mix(db, "a", now - timedelta(hours=1), now + timedelta(hours=1), low=0.5)
    assert [(r["modalities"], r["scored"], round(r["mean"], 3), r["below"]) for r in rows] == [
        ("text+audio", 2, 0.6, 1),
        ("text+image+audio", 1, 0.2, 1),
    ]


def test_a_monthly_budget_holds_against_parallel_requests(db):
    """16 parallel requests whose worst case is 4,000 tokens, a budget of 5,000: one runs, fifteen are refused
    with a quota error, and once it settles at 1,500 the next 3,500 fit."""
    from serving.errors import QuotaExceeded
    from tenancy.limits import RedisLimiter

    d = Directory(db, "s")
    t = d.create_tenant(f"budget-{uuid.uuid4().hex[:6]}", monthly_token_budget=5000)
    key = d.issue_key(t.id).key

    async def run():
        gate = QuotaGate(RedisLimiter("redis://127.0.0.1:6379/0", prefix=f"t-{uuid.uuid4().hex[:6]}"), db)
        policy = gate.policy(d.resolve(key))
        results = await asyncio.gather(
            *(policy.reserve("small", _tokens(4000)) for _ in range(16)), return_exceptions=True
        )
        holds = [r for r in results if not isinstance(r, BaseException)]
        refused = [r for r in results if isinstance(r, QuotaExceeded)]
        await holds[0].settle(_tokens(1500))
        fits = await policy.reserve("small", _tokens(3500))
        with pytest.raises(QuotaExceeded):
            await policy.reserve("small", _tokens(1))
        await fits.settle(_tokens(0))
        return len(holds), len(refused)

    assert asyncio.run(run()) == (1, 15)


def test_a_monthly_spending_budget_holds_against_parallel_requests(db):
    """Prices of 1 micro per text token and 2 per output token, a budget of 4,000 micros, 16 parallel requests
    whose worst case is 1,000 + 1,000 tokens (3,000 micros): one runs, fifteen are refused; once it settles at
    1,000 + 200 tokens (1,400 micros) a worst case of exactly the 2,600 left fits, and nothing more."""
    from billing.prices import PriceBook
    from serving.errors import QuotaExceeded
    from tenancy.limits import RedisLimiter

    d = Directory(db, "s")
    t = d.create_tenant(f"spend-{uuid.uuid4().hex[:6]}")
    d.set_quota(t.id, monthly_cost_budget_micros=4000)
    key = d.issue_key(t.id).key
    prices = PriceBook(db)
    prices.set("small", "text_input", 1_000_000)
    prices.set("small", "output", 2_000_000)

    async def run():
        limiter = RedisLimiter("redis://127.0.0.1:6379/0", prefix=f"t-{uuid.uuid4().hex[:6]}")
        policy = QuotaGate(limiter, db, prices=prices).policy(d.resolve(key))
        worst = TokenUsage(prompt=1000, completion=1000, text=1000)
        results = await asyncio.gather(*(policy.reserve("small", worst) for _ in range(16)), return_exceptions=True)
        holds = [r for r in results if not isinstance(r, BaseException)]
        refused = [r for r in results if isinstance(r, QuotaExceeded) and "spending" in r.message]
        await holds[0].settle(TokenUsage(prompt=1000, completion=200, text=1000))
        with pytest.raises(QuotaExceeded):
            await policy.reserve("small", worst)
        fits = await policy.reserve("small", TokenUsage(prompt=1000, completion=800, text=1000))
        with pytest.raises(QuotaExceeded):
            await policy.reserve("small", _tokens(1))
        await fits.settle(TokenUsage())
        return len(holds), len(refused)

    assert asyncio.run(run()) == (1, 15)


def test_precheck_refuses_a_tenant_with_no_slot_left_without_reserving(db):
    from serving.errors import RateLimited

    d = Directory(db, "s")
    t = d.create_tenant(f"pre-{uuid.uuid4().hex[:6]}", concurrency=1)
    key = d.issue_key(t.id).key
    limiter = InProcessLimiter()
    gate = QuotaGate(limiter, db)

    async def run():
        policy = gate.policy(d.resolve(key))
        await policy.precheck()  # room: passes, and takes nothing
        assert await limiter.usage(t.id) == (0, 0)
        hold = await policy.reserve("small", _tokens(10))
        with pytest.raises(RateLimited) as refused:
            await policy.precheck()
        assert refused.value.limits["x-ratelimit-remaining-requests"] == "0"  # the client sees every counter
        assert refused.value.limits["x-ratelimit-limit-tokens"] == str(d.resolve(key).quota.tokens_per_minute)
        await hold.settle(_tokens(10))
        await policy.precheck()

    asyncio.run(run())
