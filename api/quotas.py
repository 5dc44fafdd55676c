"""The caller's side of a request: model permission, monthly budget and rate limits, reserved then reconciled."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from sqlalchemy import Engine

from api.auth import PermissionDenied
from api.errors import QuotaExceeded, RateLimited
from tenancy.directory import Principal
from tenancy.limits import Limits, RateLimiter, Reservation
from tenancy.metering import spent_this_month


@dataclass
class Admission:
    """What one request holds against its tenant until it ends."""

    reservation: Reservation | None = None
    headers: dict[str, str] | None = None


class QuotaGate:
    def __init__(self, limiter: RateLimiter, db: Engine, *, budget_cache_s: float = 5.0) -> None:
        self._limiter = limiter
        self._db = db
        self._budget_cache_s = budget_cache_s
        self._month: dict[str, tuple[float, int, int]] = {}  # tenant -> (valid until, tokens, cost micros)

    async def check(self, principal: Principal, pool: str, tokens: int, holder: Admission) -> None:
        if not principal.may_use(pool):
            raise PermissionDenied(
                f"this API key may not use the model '{pool}'", param="model", code="model_not_allowed"
            )
        quota = principal.quota
        if principal.tenant_id is None or quota is None:
            return
        if quota.monthly_token_budget is not None or quota.monthly_cost_budget_micros is not None:
            tokens_used, cost_used = await self._spent(principal.tenant_id)
            over_tokens = quota.monthly_token_budget is not None and tokens_used + tokens > quota.monthly_token_budget
            over_cost = quota.monthly_cost_budget_micros is not None and cost_used >= quota.monthly_cost_budget_micros
            if over_tokens or over_cost:
                what = "token" if over_tokens else "spending"
                raise QuotaExceeded(
                    f"the monthly {what} budget of this tenant is spent; raise it or wait for the next month"
                )
        decision = await self._limiter.reserve(
            principal.tenant_id, tokens, Limits(quota.tokens_per_minute, quota.concurrent_requests)
        )
        holder.headers = decision.headers()
        if decision.reservation is None:
            what = "concurrent requests" if decision.reason == "concurrency" else "tokens per minute"
            raise RateLimited(
                f"rate limit reached for {what}: limit {decision.limit_tokens} tokens / "
                f"{decision.limit_requests} concurrent; this request needs {tokens} tokens",
                headers=decision.headers(),
            )
        holder.reservation = decision.reservation

    async def finish(self, holder: Admission, actual_tokens: int) -> None:
        """Reconcile the reservation to what was used (0 if refused before the engine) and free the slot."""
        if holder.reservation is None:
            return
        reservation, holder.reservation = holder.reservation, None
        await self._limiter.reconcile(reservation, actual_tokens)
        await self._limiter.release(reservation)
        cached = self._month.get(reservation.tenant)
        if cached is not None:
            self._month[reservation.tenant] = (cached[0], cached[1] + actual_tokens, cached[2])

    async def _spent(self, tenant_id: str) -> tuple[int, int]:
        now = time.monotonic()
        cached = self._month.get(tenant_id)
        if cached is None or cached[0] < now:
            tokens, cost = await asyncio.to_thread(spent_this_month, self._db, tenant_id)
            self._month[tenant_id] = (now + self._budget_cache_s, tokens, cost)
            return tokens, cost
        return cached[1], cached[2]
