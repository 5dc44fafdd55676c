"""Per-tenant rate limits: tokens per minute and concurrent requests, atomic across gateway processes.

A request reserves its estimated tokens (prompt, with media counted from headers, plus max_tokens) before
the engine sees it, and a concurrency slot; afterwards the reservation is reconciled to the tokens actually
used and the slot returned. The window slides: tokens accepted in any window never exceed the limit by more
than one request's reservation. Production keeps the counters in Redis (one Lua script per decision, so
replicas never race); the embedded default keeps them in-process.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from serving.errors import Unavailable


@dataclass(frozen=True)
class Limits:
    tokens_per_minute: int
    concurrent_requests: int


@dataclass
class Reservation:
    tenant: str
    token: str
    tokens: int
    at: float


@dataclass(frozen=True)
class Decision:
    """Either a reservation, or the refusal with what the client needs to back off."""

    reservation: Reservation | None
    limit_tokens: int
    remaining_tokens: int
    limit_requests: int
    remaining_requests: int
    reset_s: float
    reason: str | None = None  # tokens | concurrency

    def headers(self) -> dict[str, str]:
        reset = f"{max(0.0, self.reset_s):.3f}s"
        out = {
            "x-ratelimit-limit-tokens": str(self.limit_tokens),
            "x-ratelimit-remaining-tokens": str(max(0, self.remaining_tokens)),
            "x-ratelimit-reset-tokens": reset,
            "x-ratelimit-limit-requests": str(self.limit_requests),
            "x-ratelimit-remaining-requests": str(max(0, self.remaining_requests)),
            "x-ratelimit-reset-requests": reset if self.reason == "concurrency" else "0s",
        }
        if self.reservation is None:
            out["retry-after"] = str(max(1, math.ceil(self.reset_s)))
            out["retry-after-ms"] = str(max(1, int(self.reset_s * 1000)))
        return out


@runtime_checkable
class RateLimiter(Protocol):
    async def reserve(self, tenant: str, tokens: int, limits: Limits) -> Decision: ...

    async def reconcile(self, reservation: Reservation, actual_tokens: int) -> None: ...

    async def release(self, reservation: Reservation) -> None: ...

    async def usage(self, tenant: str) -> tuple[int, int]:
        """(tokens in the current window, requests in flight) for one tenant, without reserving."""
        ...

    async def reserve_budget(self, tenant: str, month: str, tokens: int, budget: int, floor: int) -> tuple[bool, int]:
        """Add `tokens` to the tenant's month (settled plus reserved) if that stays within `budget`. The month
        starts from `floor`, what the finished rows say, and never counts less. Returns (reserved, month)."""
        ...

    async def settle_budget(self, tenant: str, month: str, reserved: int, used: int) -> None:
        """Replace a budget reservation by the tokens used."""
        ...


@dataclass
class _TenantWindow:
    entries: deque[tuple[float, str, int]] = field(default_factory=deque)
    active: set[str] = field(default_factory=set)


class InProcessLimiter:
    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._tenants: dict[str, _TenantWindow] = {}
        self._months: dict[tuple[str, str], int] = {}  # (tenant, month) -> settled plus reserved tokens
        self._lock = asyncio.Lock()

    async def reserve_budget(self, tenant: str, month: str, tokens: int, budget: int, floor: int) -> tuple[bool, int]:
        async with self._lock:
            current = max(self._months.get((tenant, month), 0), floor)
            if current + tokens > budget:
                return False, current
            self._months[(tenant, month)] = current + tokens
            return True, current + tokens

    async def settle_budget(self, tenant: str, month: str, reserved: int, used: int) -> None:
        async with self._lock:
            if (tenant, month) in self._months:
                self._months[(tenant, month)] += used - reserved

    async def reserve(self, tenant: str, tokens: int, limits: Limits) -> Decision:
        async with self._lock:
            now = time.time()
            win = self._tenants.setdefault(tenant, _TenantWindow())
            while win.entries and win.entries[0][0] <= now - self.window_s:
                win.entries.popleft()
            used = sum(e[2] for e in win.entries)
            reset = (win.entries[0][0] + self.window_s - now) if win.entries else 0.0
            if len(win.active) >= limits.concurrent_requests:
                return Decision(
                    None,
                    limits.tokens_per_minute,
                    limits.tokens_per_minute - used,
                    limits.concurrent_requests,
                    0,
                    1.0,
                    "concurrency",
                )
            if used + tokens > limits.tokens_per_minute:
                return Decision(
                    None,
                    limits.tokens_per_minute,
                    limits.tokens_per_minute - used,
                    limits.concurrent_requests,
                    limits.concurrent_requests - len(win.active),
                    reset or self.window_s,
                    "tokens",
                )
            token = uuid.uuid4().hex
            win.entries.append((now, token, tokens))
            win.active.add(token)
            return Decision(
                Reservation(tenant, token, tokens, now),
                limits.tokens_per_minute,
                limits.tokens_per_minute - used - tokens,
                limits.concurrent_requests,
                limits.concurrent_requests - len(win.active),
                reset,
            )

    async def reconcile(self, reservation: Reservation, actual_tokens: int) -> None:
        async with self._lock:
            win = self._tenants.get(reservation.tenant)
            if win is None:
                return
            for i, (at, token, _) in enumerate(win.entries):
                if token == reservation.token:
                    win.entries[i] = (at, token, actual_tokens)
                    break
            reservation.tokens = actual_tokens

    async def release(self, reservation: Reservation) -> None:
        async with self._lock:
            win = self._tenants.get(reservation.tenant)
            if win is not None:
                win.active.discard(reservation.token)

    async def usage(self, tenant: str) -> tuple[int, int]:
        async with self._lock:
            win = self._tenants.get(tenant)
            if win is None:
                return 0, 0
            since = time.time() - self.window_s
            return sum(n for at, _, n in win.entries if at > since), len(win.active)


# KEYS: tokens zset, active zset. ARGV: now, window, tokens, tpm, concurrency, token id, slot ttl.
# The zset member is "<token>:<tokens>", scored by time; sums are over the live window.
_RESERVE = """
local now = tonumber(ARGV[1]); local window = tonumber(ARGV[2]); local want = tonumber(ARGV[3])
local tpm = tonumber(ARGV[4]); local conc = tonumber(ARGV[5]); local id = ARGV[6]; local ttl = tonumber(ARGV[7])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
local used = 0
local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local oldest = nil
for i = 1, #entries, 2 do
  local n = tonumber(string.match(entries[i], ':(%d+)$'))
  used = used + n
  if oldest == nil then oldest = tonumber(entries[i + 1]) end
end
local reset = 0
if oldest ~= nil then reset = oldest + window - now end
local active = redis.call('ZCARD', KEYS[2])
if active >= conc then return {0, used, active, tostring(reset), 'concurrency'} end
if used + want > tpm then return {0, used, active, tostring(reset > 0 and reset or window), 'tokens'} end
redis.call('ZADD', KEYS[1], now, id .. ':' .. want)
redis.call('ZADD', KEYS[2], now, id)
redis.call('EXPIRE', KEYS[1], math.ceil(window) + 5)
redis.call('EXPIRE', KEYS[2], math.ceil(ttl) + 5)
return {1, used + want, active + 1, tostring(reset), ''}
"""

# KEYS: the month's counter. ARGV: tokens, budget, floor (finished rows), ttl.
_RESERVE_BUDGET = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[3])
if floor > current then current = floor end
if current + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return {0, current} end
redis.call('SET', KEYS[1], current + tonumber(ARGV[1]), 'EX', tonumber(ARGV[4]))
return {1, current + tonumber(ARGV[1])}
"""

# KEYS: tokens zset. ARGV: token id, old tokens, new tokens.
_RECONCILE = """
local old = ARGV[1] .. ':' .. ARGV[2]
local score = redis.call('ZSCORE', KEYS[1], old)
if score then
  redis.call('ZREM', KEYS[1], old)
  redis.call('ZADD', KEYS[1], score, ARGV[1] .. ':' .. ARGV[3])
end
return 1
"""


MONTH_TTL_S = 40 * 24 * 3600  # a month's budget counter outlives its month


class LimiterUnavailable(Unavailable):
    """The shared limits cannot be read: requests are refused (fail closed) until Redis answers again."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(
            f"rate limits are unavailable ({type(cause).__name__}); retry shortly",
            code="limits_unavailable",
            retry_after_s=2.0,
        )


class RedisLimiter:
    """The same contract on Redis, shared by every gateway replica.

    Policy when Redis fails: closed. A reservation that cannot be made is refused with 503 and `retry-after`
    (never a 500, never an unlimited request); a slot that cannot be released expires with its TTL."""

    def __init__(
        self,
        url: str,
        *,
        window_s: float = 60.0,
        slot_ttl_s: float = 900.0,
        prefix: str = "tessera",
        timeout_s: float = 1.0,
    ) -> None:
        from redis.asyncio import Redis

        self.window_s = window_s
        self._slot_ttl = slot_ttl_s
        self._prefix = prefix
        self._redis: Any = Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._reserve = self._redis.register_script(_RESERVE)
        self._reconcile = self._redis.register_script(_RECONCILE)
        self._reserve_budget = self._redis.register_script(_RESERVE_BUDGET)

    def _keys(self, tenant: str) -> list[str]:
        return [f"{self._prefix}:tpm:{tenant}", f"{self._prefix}:active:{tenant}"]

    async def reserve(self, tenant: str, tokens: int, limits: Limits) -> Decision:
        from redis.exceptions import RedisError

        token = uuid.uuid4().hex
        args = [time.time(), self.window_s, tokens, limits.tokens_per_minute, limits.concurrent_requests]
        try:
            ok, used, active, reset, reason = await self._reserve(
                keys=self._keys(tenant), args=[*args, token, self._slot_ttl]
            )
        except RedisError as exc:
            raise LimiterUnavailable(exc) from exc
        reason_s = reason.decode() if isinstance(reason, bytes) else str(reason)
        reset_s = float(reset.decode() if isinstance(reset, bytes) else reset)
        reservation = Reservation(tenant, token, tokens, time.time()) if int(ok) else None
        return Decision(
            reservation,
            limits.tokens_per_minute,
            limits.tokens_per_minute - int(used),
            limits.concurrent_requests,
            limits.concurrent_requests - int(active),
            reset_s,
            reason_s or None,
        )

    async def reconcile(self, reservation: Reservation, actual_tokens: int) -> None:
        await self._reconcile(
            keys=self._keys(reservation.tenant)[:1], args=[reservation.token, reservation.tokens, actual_tokens]
        )
        reservation.tokens = actual_tokens

    async def release(self, reservation: Reservation) -> None:
        await self._redis.zrem(self._keys(reservation.tenant)[1], reservation.token)

    async def usage(self, tenant: str) -> tuple[int, int]:
        from redis.exceptions import RedisError

        tpm_key, active_key = self._keys(tenant)
        now = time.time()
        try:
            members = await self._redis.zrangebyscore(tpm_key, now - self.window_s, "+inf")
            active = await self._redis.zcount(active_key, now - self._slot_ttl, "+inf")
        except RedisError as exc:
            raise LimiterUnavailable(exc) from exc
        used = sum(int(m.decode().rsplit(":", 1)[1]) for m in members)
        return used, int(active)

    async def reserve_budget(self, tenant: str, month: str, tokens: int, budget: int, floor: int) -> tuple[bool, int]:
        from redis.exceptions import RedisError

        try:
            ok, current = await self._reserve_budget(
                keys=[f"{self._prefix}:month:{tenant}:{month}"], args=[tokens, budget, floor, MONTH_TTL_S]
            )
        except RedisError as exc:
            raise LimiterUnavailable(exc) from exc
        return bool(int(ok)), int(current)

    async def settle_budget(self, tenant: str, month: str, reserved: int, used: int) -> None:
        # A missing counter (Redis restarted) starts again from the finished rows at the next reservation.
        key = f"{self._prefix}:month:{tenant}:{month}"
        if await self._redis.exists(key):
            await self._redis.incrby(key, used - reserved)

    async def close(self) -> None:
        await self._redis.aclose()
