"""The outbox worker: sends pending meter events to Stripe off the request path, with backoff.

Rows are written in the same transaction as their usage record, so nothing is lost if the process dies.
A row is marked sent only after Stripe accepted it; a crash between the two resends the same
`identifier`, which Stripe deduplicates, so nothing is counted twice either.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from billing.stripe_meters import StripeError, StripeMeters
from db.models import BillingOutbox, StripeCustomer, Tenant

logger = logging.getLogger(__name__)


def backoff_s(attempts: int) -> float:
    return min(300.0, 0.5 * 2 ** max(0, attempts - 1))


class OutboxWorker:
    def __init__(self, db: Engine, meters: StripeMeters, *, batch: int = 100, idle_s: float = 1.0) -> None:
        self._db = db
        self._meters = meters
        self._batch = batch
        self._idle_s = idle_s
        self.after_send: Callable[[BillingOutbox], None] | None = None  # test hook: runs between send and mark
        self.sent = 0
        self.failures = 0

    def run_once(self, now: datetime | None = None) -> int:
        """Send what is due; returns how many rows were marked sent. Blocking."""
        now = now or datetime.now(UTC)
        with Session(self._db, expire_on_commit=False) as s:
            due = list(
                s.exec(
                    select(BillingOutbox)
                    .where(BillingOutbox.status == "pending", col(BillingOutbox.next_attempt_at) <= now)
                    .order_by(col(BillingOutbox.created_at))
                    .limit(self._batch)
                )
            )
        if not due:
            return 0
        try:
            self._meters.ensure_meters()
        except StripeError as exc:
            self._defer(due, f"meters: {exc}")
            return 0
        done = 0
        for row in due:
            try:
                customer = self._customer(row.tenant_id)
                self._meters.send(
                    row.identifier,
                    row.dimension,
                    customer,
                    row.quantity,
                    int(row.created_at.replace(tzinfo=row.created_at.tzinfo or UTC).timestamp()),
                )
            except StripeError as exc:
                self._defer([row], str(exc))
                continue
            if self.after_send is not None:
                self.after_send(row)
            self._mark_sent(row)
            done += 1
        self.sent += done
        return done

    def _customer(self, tenant_id: str) -> str:
        with Session(self._db, expire_on_commit=False) as s:
            mapping = s.get(StripeCustomer, tenant_id)
            if mapping is not None:
                return mapping.customer_id
            tenant = s.get(Tenant, tenant_id)
            customer_id = self._meters.create_customer(tenant_id, tenant.name if tenant else None)
            s.add(StripeCustomer(tenant_id=tenant_id, customer_id=customer_id))
            s.commit()
            return customer_id

    def _mark_sent(self, row: BillingOutbox) -> None:
        with Session(self._db) as s:
            fresh = s.get(BillingOutbox, row.identifier)
            if fresh is not None:
                fresh.status = "sent"
                fresh.sent_at = datetime.now(UTC)
                fresh.attempts += 1
                s.add(fresh)
                s.commit()

    def _defer(self, rows: list[BillingOutbox], error: str) -> None:
        self.failures += len(rows)
        logger.warning("Stripe unavailable for %d meter events; retrying later: %s", len(rows), error[:200])
        with Session(self._db) as s:
            for row in rows:
                fresh = s.get(BillingOutbox, row.identifier)
                if fresh is None:
                    continue
                fresh.attempts += 1
                fresh.last_error = error[:500]
                fresh.next_attempt_at = datetime.now(UTC) + timedelta(seconds=backoff_s(fresh.attempts))
                s.add(fresh)
            s.commit()

    async def run_forever(self) -> None:
        while True:
            try:
                sent = await asyncio.to_thread(self.run_once)
            except Exception:
                logger.exception("billing outbox pass failed")
                sent = 0
            if not sent:
                await asyncio.sleep(self._idle_s)

    def pending(self) -> int:
        with Session(self._db) as s:
            return len(list(s.exec(select(BillingOutbox.identifier).where(BillingOutbox.status == "pending"))))
