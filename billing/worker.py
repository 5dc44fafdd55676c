"""The outbox worker: sends due meter events to Stripe off the request path, in leased batches, concurrently.

Rows are written in the same transaction as their usage record, so nothing is lost if the process dies. Each pass
claims a batch under a lease (billing.outbox), sends it with bounded concurrency on the event loop (the Stripe SDK's
async client; the database on worker threads), then settles every row in one transaction. A row is marked sent
only after Stripe accepted it; a crash in between leaves it leased until the lease runs out and then resends the
same `identifier` under the same idempotency key, so Stripe counts it once. What Stripe will never accept (past
its 35-day window, or refused with a permanent 4xx) becomes a dead letter; everything else backs off per row.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from sqlalchemy import Engine

from billing import outbox
from billing.outbox_policy import Failure, OutboxPolicy, Verdict, as_utc, backoff_s, classify, meter_idempotency_key
from billing.stripe_meters import MeterEvent, StripeFailure, StripeMeters
from db.models import BillingOutbox

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Clock:
    """One pass's time: `now` may be injected (tests), the rest is measured on the monotonic clock from there."""

    now: datetime
    started: float
    lease_ends: float

    def after(self, delay_s: float) -> datetime:
        return self.now + timedelta(seconds=time.monotonic() - self.started + delay_s)


@dataclass(frozen=True)
class PassResult:
    claimed: int  # rows this pass took out of the due set, expired ones included
    sent: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0  # handed back unsent: too little of the lease was left to send them


class OutboxMetrics:
    def __init__(self, registry: Any) -> None:
        self.sent = Counter("tessera_billing_events_sent", "Meter events Stripe accepted.", registry=registry)
        self.retried = Counter(
            "tessera_billing_events_retried", "Meter event sends that failed and will be retried.", registry=registry
        )
        self.dead = Counter(
            "tessera_billing_events_dead_lettered",
            "Meter events Stripe will never accept: past its 35-day window (expired) or refused (refused).",
            ["reason"],
            registry=registry,
        )


class OutboxWorker:
    def __init__(
        self,
        db: Engine,
        meters: StripeMeters,
        *,
        policy: OutboxPolicy | None = None,
        worker_id: str | None = None,
        idle_s: float = 1.0,
        registry: Any = None,
        rng: random.Random | None = None,
    ) -> None:
        self._db = db
        self._meters = meters
        self._policy = policy or OutboxPolicy()
        self.worker_id = worker_id or f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._idle_s = idle_s
        self._rng = rng or random.Random()
        self._metrics = OutboxMetrics(registry if registry is not None else CollectorRegistry())
        # Test hook: runs with the rows Stripe accepted, after the sends and before they are marked sent.
        self.after_send: Callable[[list[BillingOutbox]], None] | None = None

    async def run_once(self, now: datetime | None = None) -> PassResult:
        """Claim one batch of due rows, send it and settle it."""
        now = now or datetime.now(UTC)
        started = time.monotonic()  # before the claim: the lease it writes counts from `now`
        claimed = await asyncio.to_thread(outbox.claim, self._db, self.worker_id, now, self._policy)
        if claimed.expired:
            self._metrics.dead.labels("expired").inc(claimed.expired)
            logger.warning("%d meter events were past Stripe's 35-day window: dead-lettered", claimed.expired)
        if not claimed.rows:
            return PassResult(claimed=claimed.expired, dead=claimed.expired)
        settlements = await self._send_all(claimed.rows, _Clock(now, started, started + self._policy.lease_s))
        if self.after_send is not None:
            verdicts = {x.identifier: x.verdict for x in settlements}
            self.after_send([r for r in claimed.rows if verdicts[r.identifier] is Verdict.SENT])
        await asyncio.to_thread(outbox.settle, self._db, self.worker_id, settlements)
        return self._count(claimed, settlements)

    async def _send_all(self, rows: list[BillingOutbox], clock: _Clock) -> list[outbox.Settlement]:
        try:
            await self._meters.ensure_meters()
        except StripeFailure as exc:
            return [self._retry(row, clock, exc.failure, Verdict.RETRY, "meters") for row in rows]
        gate = asyncio.Semaphore(self._policy.concurrency)
        customers = await self._customers({r.tenant_id for r in rows}, gate)
        return list(await asyncio.gather(*(self._send(row, customers, gate, clock) for row in rows)))

    async def _send(
        self,
        row: BillingOutbox,
        customers: dict[str, str | Failure],
        gate: asyncio.Semaphore,
        clock: _Clock,
    ) -> outbox.Settlement:
        customer = customers[row.tenant_id]
        if isinstance(customer, Failure):
            # The customer is ours to set up, not the event's fault: never a dead letter, whatever the status.
            return self._retry(row, clock, customer, Verdict.RETRY, "customer")
        async with gate:
            if time.monotonic() + self._meters.timeout_s + 1.0 > clock.lease_ends:
                return outbox.Settlement(row.identifier, None)  # another worker may claim it once the lease ends
            event = MeterEvent(
                identifier=row.identifier,
                dimension=row.dimension,
                customer_id=customer,
                quantity=row.quantity,
                timestamp=int(as_utc(row.created_at).timestamp()),
            )
            try:
                await self._meters.send(event, meter_idempotency_key(row.identifier, row.key_generation))
            except StripeFailure as exc:
                verdict = classify(exc.failure)
                if verdict is Verdict.SENT:
                    logger.info("meter event %s was already recorded by Stripe", row.identifier)
                    return outbox.Settlement(row.identifier, Verdict.SENT)
                if verdict is Verdict.DEAD:
                    logger.error("Stripe refused meter event %s for good: %s", row.identifier, exc)
                    return outbox.Settlement(row.identifier, Verdict.DEAD, error=f"refused by Stripe: {exc}")
                return self._retry(row, clock, exc.failure, verdict, "send")
            except Exception as exc:  # a bug must not lose the event: keep the row, say so loudly
                logger.exception("meter event %s failed unexpectedly", row.identifier)
                return self._retry(row, clock, Failure(status=None, message=repr(exc)), Verdict.RETRY, "send")
        return outbox.Settlement(row.identifier, Verdict.SENT)

    async def _customers(self, tenant_ids: set[str], gate: asyncio.Semaphore) -> dict[str, str | Failure]:
        """Each tenant's Stripe customer, created (idempotently, keyed by tenant) where there is none yet."""
        known: dict[str, str | Failure] = dict(await asyncio.to_thread(outbox.customer_ids, self._db, tenant_ids))
        missing = tenant_ids - known.keys()
        if not missing:
            return known
        names = await asyncio.to_thread(outbox.tenant_names, self._db, missing)

        async def create(tenant_id: str) -> str | Failure:
            async with gate:
                try:
                    created = await self._meters.create_customer(tenant_id, names.get(tenant_id))
                except StripeFailure as exc:
                    logger.warning("Stripe customer for tenant %s not created yet: %s", tenant_id, exc)
                    return exc.failure
            return await asyncio.to_thread(outbox.save_customer, self._db, tenant_id, created)

        order = sorted(missing)
        known.update(zip(order, await asyncio.gather(*(create(t) for t in order)), strict=True))
        return known

    def _retry(
        self, row: BillingOutbox, clock: _Clock, failure: Failure, verdict: Verdict, stage: str
    ) -> outbox.Settlement:
        delay = backoff_s(self._policy, row.attempts + 1, self._rng)
        error = f"{stage}: {failure.status or 'no answer'} {failure.code or ''} {failure.message}"
        return outbox.Settlement(row.identifier, verdict, error=error, retry_at=clock.after(delay))

    def _count(self, claimed: outbox.Claimed, settlements: list[outbox.Settlement]) -> PassResult:
        by = [x.verdict for x in settlements]
        result = PassResult(
            claimed=len(claimed.rows) + claimed.expired,
            sent=by.count(Verdict.SENT),
            retried=by.count(Verdict.RETRY) + by.count(Verdict.RETRY_NEW_KEY),
            dead=by.count(Verdict.DEAD) + claimed.expired,
            released=by.count(None),
        )
        self._metrics.sent.inc(result.sent)
        self._metrics.retried.inc(result.retried)
        self._metrics.dead.labels("refused").inc(by.count(Verdict.DEAD))
        if result.retried:
            logger.warning("%d meter events will be retried; Stripe is failing or unreachable", result.retried)
        return result

    async def run_forever(self) -> None:
        while True:
            try:
                result = await self.run_once()
            except Exception:
                logger.exception("billing outbox pass failed")
                result = PassResult(claimed=0)
            # Straight on only after a full batch that got through: more are due, and Stripe is answering.
            if result.claimed < self._policy.batch or not result.sent:
                await asyncio.sleep(self._idle_s)

    def counts(self) -> dict[str, int]:
        """Rows per status. Blocking."""
        return outbox.counts(self._db)

    def pending(self) -> int:
        """Rows not yet sent or dead-lettered. Blocking."""
        return self.counts()["pending"]
