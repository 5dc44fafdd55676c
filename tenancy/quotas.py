"""The tenant's caller policy: model permission, prefix-cache salt, budgets and rate limits.

`QuotaGate.policy(principal)` is what the API and the console hand to `InferenceService.start`, so both
callers are salted, limited and metered the same way. A request reserves its worst case against the tenant's
tokens-per-minute and concurrency limits and against its monthly budgets: tokens, and the spend those tokens
would cost at the model's prices (every medium priced fresh, every choice at `max_tokens`). The monthly
reservations live in the limiter (Redis across gateways), so parallel requests cannot overrun a budget by more
than one request's worst case. The lease settles each reservation to what the request used when it ends.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Engine

from billing.prices import PriceBook, billable
from serving.errors import PermissionDenied, QuotaExceeded, RateLimited
from serving.policy import CallerIdentity, QuotaHold
from serving.record import TokenUsage
from tenancy.directory import Directory, Principal, TenantQuota
from tenancy.limits import Limits, RateLimiter, Reservation
from tenancy.metering import spent_this_month

logger = logging.getLogger(__name__)


async def _with_retries(action: Callable[[], Awaitable[None]], attempts: int = 4, first_wait_s: float = 0.25) -> None:
    """Freeing a slot is worth a few tries while the limits' store recovers; the last failure propagates and
    the slot then expires with its TTL."""
    for attempt in range(attempts):
        try:
            await action()
            return
        except Exception:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(first_wait_s * 2**attempt)


def cache_salt(principal: Principal) -> str:
    """Prefix-cache salt of the caller's tenant: tenants never share KV blocks."""
    owner = principal.tenant_id or f"key:{principal.key_id}"
    return hashlib.sha256(f"tessera-kv:{owner}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class BudgetHold:
    """What a request holds of its tenant's monthly budgets until it settles: tokens, spend (micros), or both."""

    tenant: str
    month: str
    model: str
    tokens: int | None = None
    cost_micros: int | None = None
    batch: bool = False  # spend counted at the model's batch price


def usage_quantities(usage: TokenUsage) -> dict[str, int]:
    """Billable tokens per dimension of a lease's token usage: a reservation's worst case, or what it used."""
    return billable(
        text=usage.text,
        image=usage.image,
        audio=usage.audio,
        cached_image=usage.cached_image,
        cached_audio=usage.cached_audio,
        output=usage.completion,
        audio_ms=usage.audio_ms,
        cached_audio_ms=usage.cached_audio_ms,
    )


def _cost_counter(month: str) -> str:
    """The limiter's month counter for spend, beside the token counter `month`."""
    return f"{month}:cost"


@dataclass
class TenantHold:
    """One request's reservation against its tenant's limits and budget."""

    gate: QuotaGate
    reservation: Reservation | None
    limits: dict[str, str] = field(default_factory=dict)
    budget: BudgetHold | None = None

    async def settle(self, used: TokenUsage) -> None:
        reservation, self.reservation = self.reservation, None
        budget, self.budget = self.budget, None
        try:
            if reservation is not None:
                await self.gate.settle(reservation, used.total)
        finally:
            if budget is not None:
                await self.gate.settle_budget(budget, used)


@dataclass(frozen=True)
class TenantPolicy:
    """A principal's policy for one request. With `batch_line` (the line's fixed request id) it is a batch line's:
    billed at the batch price and counted in the monthly budgets, but not in the tokens-per-minute or
    concurrency limits, which protect interactive traffic. With `judge_call` (its fixed request id) it is a
    grounding judge's question about one of the tenant's answers (grounding.judge): billed at the interactive
    price and counted in the monthly budgets, but not in the rate limits (a tenant at its limit must not block
    the check of its own answer), and never scored itself."""

    principal: Principal
    gate: QuotaGate
    batch_line: str | None = None
    judge_call: str | None = None

    @property
    def identity(self) -> CallerIdentity:
        quota = self.principal.quota
        identity = CallerIdentity(self.principal.tenant_id, self.principal.key_id)
        if quota is not None:
            identity = dataclasses.replace(
                identity,
                grounding_policy=quota.grounding_policy,
                grounding_threshold=quota.grounding_threshold,
                grounding_evidence=quota.grounding_evidence,
                routing_policy=quota.routing_policy,
            )
        if self.batch_line is not None:
            identity = dataclasses.replace(identity, priority="batch", request_id=self.batch_line)
        if self.judge_call is not None:
            identity = dataclasses.replace(identity, grounding_policy="off", request_id=self.judge_call)
        return identity

    def judging(self, request_id: str) -> TenantPolicy:
        """This principal's policy for a judge call with the request id `request_id`."""
        return dataclasses.replace(self, batch_line=None, judge_call=request_id)

    @property
    def cache_salt(self) -> str:
        return cache_salt(self.principal)

    def _check_model(self, model: str) -> None:
        if not self.principal.may_use(model):
            raise PermissionDenied(
                f"this API key may not use the model '{model}'", param="model", code="model_not_allowed"
            )

    async def precheck(self) -> None:
        if self.batch_line is None and self.judge_call is None:
            await self.gate.precheck(self.principal)

    def check_model(self, model: str) -> None:
        if self.judge_call is None:
            self._check_model(model)  # the judge pool is the operator's choice, not the key's

    async def reserve(self, model: str, worst: TokenUsage) -> QuotaHold:
        self.check_model(model)
        batch = self.batch_line is not None
        return await self.gate.reserve(
            self.principal, model, worst, batch=batch, rate_limited=not batch and self.judge_call is None
        )


class QuotaGate:
    def __init__(
        self, limiter: RateLimiter, db: Engine, *, prices: PriceBook | None = None, budget_cache_s: float = 5.0
    ) -> None:
        self._limiter = limiter
        self._db = db
        self._prices = prices or PriceBook(db)  # queried only when a spending budget is set
        self._budget_cache_s = budget_cache_s
        self._month: dict[str, tuple[float, int, int]] = {}  # tenant -> (valid until, tokens, cost micros)
        self._batch_line: str | None = None

    def policy(self, principal: Principal) -> TenantPolicy:
        return TenantPolicy(principal, self, self._batch_line)

    def for_batch_line(self, request_id: str) -> QuotaGate:
        """This gate, handing out batch-line policies for the line whose request id is `request_id`."""
        view = copy.copy(self)  # shares the limiter and the month cache
        view._batch_line = request_id
        return view

    async def precheck(self, principal: Principal) -> None:
        """Refuse at once a tenant whose request slots or tokens are all taken, before the request costs the
        gateway a media fetch or a tokenization."""
        quota = principal.quota
        if principal.tenant_id is None or quota is None:
            return
        tokens, active = await self._limiter.usage(principal.tenant_id)
        limits = {
            "x-ratelimit-limit-requests": str(quota.concurrent_requests),
            "x-ratelimit-remaining-requests": str(max(0, quota.concurrent_requests - active)),
            "x-ratelimit-reset-requests": "1s",
            "x-ratelimit-limit-tokens": str(quota.tokens_per_minute),
            "x-ratelimit-remaining-tokens": str(max(0, quota.tokens_per_minute - tokens)),
            "x-ratelimit-reset-tokens": "1s",
        }
        if active >= quota.concurrent_requests:
            raise RateLimited(
                f"rate limit reached for concurrent requests: {quota.concurrent_requests} already running",
                retry_after_s=1.0,
                limits=limits,
            )
        if tokens >= quota.tokens_per_minute:
            raise RateLimited(
                f"rate limit reached for tokens per minute: {quota.tokens_per_minute} used",
                retry_after_s=1.0,
                limits=limits,
            )

    async def reserve(
        self, principal: Principal, model: str, worst: TokenUsage, *, batch: bool = False, rate_limited: bool = True
    ) -> TenantHold:
        """Reserves `worst` against the tenant's monthly budgets (priced at the batch price with `batch`) and, when
        `rate_limited` and not `batch`, its rate limits."""
        quota = principal.quota
        if principal.tenant_id is None or quota is None:
            return TenantHold(self, None)
        tokens = worst.total
        budget = await self._reserve_budget(principal.tenant_id, quota, model, worst, batch=batch)
        if batch or not rate_limited:
            return TenantHold(self, None, {}, budget)
        try:
            decision = await self._limiter.reserve(
                principal.tenant_id, tokens, Limits(quota.tokens_per_minute, quota.concurrent_requests)
            )
        except BaseException:
            if budget is not None:
                await self.settle_budget(budget, TokenUsage())
            raise
        if decision.reservation is None and budget is not None:
            await self.settle_budget(budget, TokenUsage())
        counters = {k: v for k, v in decision.headers().items() if k.startswith("x-ratelimit")}
        if decision.reservation is None:
            what = "concurrent requests" if decision.reason == "concurrency" else "tokens per minute"
            raise RateLimited(
                f"rate limit reached for {what}: limit {decision.limit_tokens} tokens / "
                f"{decision.limit_requests} concurrent; this request needs {tokens} tokens",
                retry_after_s=max(decision.reset_s, 0.001),
                limits=counters,
            )
        return TenantHold(self, decision.reservation, counters, budget)

    async def _reserve_budget(
        self, tenant_id: str, quota: TenantQuota, model: str, worst: TokenUsage, *, batch: bool = False
    ) -> BudgetHold | None:
        """Reserve the request's worst case against the monthly token and spending budgets, across every gateway,
        so parallel requests cannot overrun either by more than one request's worst case."""
        if quota.monthly_token_budget is None and quota.monthly_cost_budget_micros is None:
            return None
        tokens_used, cost_used = await self._spent(tenant_id)
        month = datetime.now(UTC).strftime("%Y-%m")
        hold = BudgetHold(tenant_id, month, model, batch=batch)
        if quota.monthly_cost_budget_micros is not None:
            # Rounded up, so a request is never reserved for less than its bill; the prices may take a query.
            cost = await asyncio.to_thread(
                self._prices.cost_of, model, usage_quantities(worst), round_up=True, batch=batch
            )
            ok, _ = await self._limiter.reserve_budget(
                tenant_id, _cost_counter(month), cost, quota.monthly_cost_budget_micros, cost_used
            )
            if not ok:
                raise QuotaExceeded(
                    "the monthly spending budget of this tenant cannot cover this request (at most "
                    f"{cost / 1e6:.6f} at {model}'s prices); raise it or wait for the next month"
                )
            hold = dataclasses.replace(hold, cost_micros=cost)
        if quota.monthly_token_budget is not None:
            try:
                ok, _ = await self._limiter.reserve_budget(
                    tenant_id, month, worst.total, quota.monthly_token_budget, tokens_used
                )
            except BaseException:
                await self.settle_budget(hold, TokenUsage())
                raise
            if not ok:
                await self.settle_budget(hold, TokenUsage())
                raise QuotaExceeded(
                    f"the monthly token budget of this tenant ({quota.monthly_token_budget}) cannot cover this "
                    f"request ({worst.total} tokens at most); raise it or wait for the next month"
                )
            hold = dataclasses.replace(hold, tokens=worst.total)
        return hold

    async def settle_budget(self, budget: BudgetHold, used: TokenUsage) -> None:
        """Replace the budget reservations by what was used (strict on failure: the month then keeps counting
        the reserved worst case, never less)."""
        counters: list[tuple[str, int, int]] = []
        if budget.tokens is not None:
            counters.append((budget.month, budget.tokens, used.total))
        if budget.cost_micros is not None:
            spent = await asyncio.to_thread(
                self._prices.cost_of, budget.model, usage_quantities(used), batch=budget.batch
            )
            counters.append((_cost_counter(budget.month), budget.cost_micros, spent))
        for counter, reserved, actual in counters:
            try:
                await _with_retries(
                    functools.partial(self._limiter.settle_budget, budget.tenant, counter, reserved, actual)
                )
            except Exception:
                logger.warning("could not settle a budget reservation of tenant %s", budget.tenant, exc_info=True)

    async def settle(self, reservation: Reservation, used_tokens: int) -> None:
        """Reconcile the reservation to what was used and free the slot; the slot is freed even when the
        reconciliation fails."""
        try:
            await _with_retries(lambda: self._limiter.reconcile(reservation, used_tokens))
        except Exception:
            # The window keeps the reserved estimate instead of the smaller actual count: safe, just strict.
            logger.warning("could not reconcile a reservation of tenant %s", reservation.tenant, exc_info=True)
        finally:
            await _with_retries(lambda: self._limiter.release(reservation))
        cached = self._month.get(reservation.tenant)
        if cached is not None:
            self._month[reservation.tenant] = (cached[0], cached[1] + used_tokens, cached[2])

    async def _spent(self, tenant_id: str) -> tuple[int, int]:
        now = time.monotonic()
        cached = self._month.get(tenant_id)
        if cached is None or cached[0] < now:
            tokens, cost = await asyncio.to_thread(spent_this_month, self._db, tenant_id)
            self._month[tenant_id] = (now + self._budget_cache_s, tokens, cost)
            return tokens, cost
        return cached[1], cached[2]


def judge_callers(
    directory: Directory, gate: QuotaGate
) -> Callable[[CallerIdentity], Awaitable[Callable[[str], TenantPolicy] | None]]:
    """For an answer of `identity`'s key: the caller policy of each of the grounding judge's questions about it
    (by the question's request id), the key's principal read once, as it is now (None once the key is gone),
    judging (`TenantPolicy.judging`)."""

    async def callers(identity: CallerIdentity) -> Callable[[str], TenantPolicy] | None:
        if identity.key_id is None:
            return None
        principal = await asyncio.to_thread(directory.by_key_id, identity.key_id)
        return None if principal is None else gate.policy(principal).judging

    return callers
