"""The limiter contract, on the in-process implementation and on the real Redis at 127.0.0.1:6379."""

import asyncio
import uuid

import pytest

from tenancy.limits import InProcessLimiter, Limits, RedisLimiter


@pytest.fixture(params=["in-process", "redis"])
def make_limiter(request):
    """A factory: the Redis client must be created inside the event loop that uses it."""
    if request.param == "in-process":
        return lambda: InProcessLimiter(window_s=0.5)
    return lambda: RedisLimiter("redis://127.0.0.1:6379/0", window_s=0.5, prefix=f"test-{uuid.uuid4().hex[:8]}")


async def _close(limiter):
    if hasattr(limiter, "close"):
        await limiter.close()


def test_tokens_per_window_and_headers(make_limiter):
    async def run():
        limiter = make_limiter()
        limits = Limits(tokens_per_minute=100, concurrent_requests=10)
        first = await limiter.reserve("t1", 60, limits)
        assert first.reservation is not None
        assert first.remaining_tokens == 40
        refused = await limiter.reserve("t1", 60, limits)
        assert refused.reservation is None
        assert refused.reason == "tokens"
        headers = refused.headers()
        assert headers["x-ratelimit-limit-tokens"] == "100"
        assert headers["x-ratelimit-remaining-tokens"] == "40"
        assert int(headers["retry-after"]) >= 1
        assert int(headers["retry-after-ms"]) <= 500
        other = await limiter.reserve("t2", 60, limits)  # tenants are independent
        assert other.reservation is not None
        await limiter.reconcile(first.reservation, 10)  # the request used fewer tokens than reserved
        assert (await limiter.reserve("t1", 60, limits)).reservation is not None
        await asyncio.sleep(0.6)  # the window slides
        assert (await limiter.reserve("t1", 90, limits)).reservation is not None
        await _close(limiter)

    asyncio.run(run())


def test_concurrency_slots_are_returned(make_limiter):
    async def run():
        limiter = make_limiter()
        limits = Limits(tokens_per_minute=10_000, concurrent_requests=2)
        a = (await limiter.reserve("t", 1, limits)).reservation
        b = (await limiter.reserve("t", 1, limits)).reservation
        third = await limiter.reserve("t", 1, limits)
        assert third.reservation is None
        assert third.reason == "concurrency"
        await limiter.release(a)
        assert (await limiter.reserve("t", 1, limits)).reservation is not None
        await limiter.release(b)
        await _close(limiter)

    asyncio.run(run())


def test_usage_reads_the_window_and_the_slots_without_reserving(make_limiter):
    async def run():
        limiter = make_limiter()
        limits = Limits(tokens_per_minute=1_000, concurrent_requests=4)
        assert await limiter.usage("t") == (0, 0)
        a = (await limiter.reserve("t", 300, limits)).reservation
        b = (await limiter.reserve("t", 200, limits)).reservation
        await limiter.reserve("other", 50, limits)
        assert await limiter.usage("t") == (500, 2)
        assert await limiter.usage("t") == (500, 2)  # reading reserves nothing
        await limiter.reconcile(a, 100)
        await limiter.release(a)
        assert await limiter.usage("t") == (300, 1)
        await limiter.release(b)
        await asyncio.sleep(0.6)  # the window slides past both
        assert await limiter.usage("t") == (0, 0)
        await _close(limiter)

    asyncio.run(run())


def test_redis_down_fails_closed_with_a_503():
    from api.errors import to_api_error
    from tenancy.limits import LimiterUnavailable

    async def run():
        limiter = RedisLimiter("redis://127.0.0.1:1/0", timeout_s=0.5)  # nothing listens there
        try:
            with pytest.raises(LimiterUnavailable) as exc:
                await limiter.reserve("t", 10, Limits(100, 2))
            return exc.value
        finally:
            await _close(limiter)

    err = to_api_error(asyncio.run(run()))
    assert (err.status_code, err.code) == (503, "limits_unavailable")
    assert int(err.headers["retry-after"]) >= 1


def test_redis_paused_refuses_new_work_and_still_frees_the_slot_it_held():
    """Redis paused for 1.5 s (CLIENT PAUSE): a reservation in the pause is refused with 503, and a slot
    released during the pause is freed once Redis answers, so the tenant's concurrency is not stuck."""
    import redis as sync_redis

    from tenancy.limits import LimiterUnavailable
    from tenancy.quotas import QuotaGate

    prefix = f"test-{uuid.uuid4().hex[:8]}"
    admin = sync_redis.Redis.from_url("redis://127.0.0.1:6379/0")

    async def run():
        limiter = RedisLimiter("redis://127.0.0.1:6379/0", prefix=prefix, timeout_s=0.5)
        gate = QuotaGate(limiter, None)  # type: ignore[arg-type]  # no budgets here, so no database
        try:
            held = await limiter.reserve("t", 10, Limits(100, 1))
            assert held.reservation is not None
            admin.execute_command("CLIENT", "PAUSE", 1500, "ALL")
            with pytest.raises(LimiterUnavailable):
                await limiter.reserve("t", 10, Limits(100, 1))
            await gate.settle(held.reservation, 7)  # retries through the pause
            assert (await limiter.usage("t"))[1] == 0
            again = await limiter.reserve("t", 10, Limits(100, 1))
            assert again.reservation is not None  # the one concurrency slot came back
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")
            await _close(limiter)

    asyncio.run(run())


def test_parallel_requests_cannot_overrun_a_monthly_budget(make_limiter):
    """16 requests of 4,000 tokens each against a budget that covers one: one is reserved, the rest refused,
    and what a settled request did not use is given back."""

    async def run():
        limiter = make_limiter()
        tenant, month = f"t-{uuid.uuid4().hex[:6]}", "2026-12"
        try:
            results = await asyncio.gather(*(limiter.reserve_budget(tenant, month, 4000, 5000, 0) for _ in range(16)))
            granted = [ok for ok, _ in results].count(True)
            await limiter.settle_budget(tenant, month, 4000, 1500)
            after_settle = await limiter.reserve_budget(tenant, month, 3500, 5000, 0)
            over = await limiter.reserve_budget(tenant, month, 1, 5000, 0)
            floored = await limiter.reserve_budget(f"{tenant}-b", month, 10, 5000, 4995)
            return granted, after_settle, over, floored
        finally:
            await _close(limiter)

    granted, after_settle, over, floored = asyncio.run(run())
    assert granted == 1
    assert after_settle == (True, 5000)  # 1,500 used + 3,500 reserved
    assert over == (False, 5000)
    assert floored == (False, 4995)  # the finished rows count even when the counter is new
