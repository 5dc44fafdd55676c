"""The billing outbox table's transitions: claim due rows under a lease, settle them, list dead letters. Blocking.

On PostgreSQL the claim is `SELECT ... FOR UPDATE SKIP LOCKED`, so replicas claiming at the same moment take
disjoint rows without waiting on each other; the lease then keeps the rows theirs after the claim commits. SQLite
has one writer at a time and ignores FOR UPDATE, so there the claim is a plain read-then-update.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, func, or_, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from billing.outbox_policy import OutboxPolicy, Verdict, as_utc, expired
from db.models import BillingOutbox, StripeCustomer, Tenant

logger = logging.getLogger(__name__)

EXPIRED_REASON = "older than Stripe's 35-day meter event window; Stripe would refuse it"


@dataclass(frozen=True)
class Claimed:
    rows: list[BillingOutbox]  # detached; this worker's until the lease ends
    expired: int  # dead-lettered by age during the claim, never sent


@dataclass(frozen=True)
class Settlement:
    identifier: str
    verdict: Verdict | None  # None: released unsent, because too little of the lease was left to send it
    error: str | None = None
    retry_at: datetime | None = None


@dataclass(frozen=True)
class DeadLetter:
    identifier: str
    request_id: str
    tenant_id: str
    dimension: str
    quantity: int
    attempts: int
    created_at: datetime
    dead_at: datetime | None
    reason: str | None


def claim(db: Engine, worker_id: str, now: datetime, policy: OutboxPolicy) -> Claimed:
    """Due, unleased rows, oldest due first, leased to `worker_id`; rows past Stripe's window become dead letters."""
    with Session(db, expire_on_commit=False) as s:
        rows = list(
            s.exec(
                select(BillingOutbox)
                .where(
                    BillingOutbox.status == "pending",
                    col(BillingOutbox.next_attempt_at) <= now,
                    or_(col(BillingOutbox.claimed_until).is_(None), col(BillingOutbox.claimed_until) <= now),
                )
                .order_by(col(BillingOutbox.next_attempt_at))
                .limit(policy.batch)
                .with_for_update(skip_locked=True)
            )
        )
        old = [r.identifier for r in rows if expired(policy, r.created_at, now)]
        live = [r for r in rows if not expired(policy, r.created_at, now)]
        until = now + timedelta(seconds=policy.lease_s)
        if old:
            s.exec(
                update(BillingOutbox)
                .where(col(BillingOutbox.identifier).in_(old))
                .values(status="dead", dead_at=now, dead_reason=EXPIRED_REASON, claimed_by=None, claimed_until=None)
            )
        if live:
            s.exec(
                update(BillingOutbox)
                .where(col(BillingOutbox.identifier).in_([r.identifier for r in live]))
                .values(claimed_by=worker_id, claimed_until=until)
            )
        s.commit()
    for row in live:
        row.claimed_by, row.claimed_until = worker_id, until
    return Claimed(live, len(old))


def settle(db: Engine, worker_id: str, settlements: Sequence[Settlement]) -> None:
    """Record what became of a pass's rows, in one transaction, releasing their leases.

    A sent row is marked sent even if its lease lapsed meanwhile (Stripe did accept it); every other transition
    applies only while this worker still holds the row, so a late worker never undoes a newer claim's work.
    """
    now = datetime.now(UTC)
    sent = [x.identifier for x in settlements if x.verdict is Verdict.SENT]
    mine = (col(BillingOutbox.claimed_by) == worker_id, col(BillingOutbox.status) == "pending")
    released = {"claimed_by": None, "claimed_until": None}
    with Session(db) as s:
        if sent:
            s.exec(
                update(BillingOutbox)
                .where(col(BillingOutbox.identifier).in_(sent), col(BillingOutbox.status) == "pending")
                .values(status="sent", sent_at=now, attempts=col(BillingOutbox.attempts) + 1, **released)
            )
        for x in settlements:
            row = update(BillingOutbox).where(col(BillingOutbox.identifier) == x.identifier, *mine)
            if x.verdict is None:
                s.exec(row.values(**released))
            elif x.verdict is Verdict.DEAD:
                s.exec(
                    row.values(
                        status="dead",
                        dead_at=now,
                        dead_reason=(x.error or "")[:500],
                        attempts=col(BillingOutbox.attempts) + 1,
                        **released,
                    )
                )
            elif x.verdict in (Verdict.RETRY, Verdict.RETRY_NEW_KEY):
                bump = 1 if x.verdict is Verdict.RETRY_NEW_KEY else 0
                s.exec(
                    row.values(
                        attempts=col(BillingOutbox.attempts) + 1,
                        last_error=(x.error or "")[:500],
                        next_attempt_at=x.retry_at or now,
                        key_generation=col(BillingOutbox.key_generation) + bump,
                        **released,
                    )
                )
        s.commit()


def counts(db: Engine) -> dict[str, int]:
    """Rows per status: pending, sent, dead."""
    with Session(db) as s:
        found = s.exec(select(BillingOutbox.status, func.count()).group_by(BillingOutbox.status))
        return {"pending": 0, "sent": 0, "dead": 0} | {str(k): int(n) for k, n in found}


def dead_letters(db: Engine, limit: int = 100) -> list[DeadLetter]:
    """The most recent dead letters first."""
    with Session(db) as s:
        rows = s.exec(
            select(BillingOutbox)
            .where(BillingOutbox.status == "dead")
            .order_by(col(BillingOutbox.dead_at).desc(), col(BillingOutbox.identifier))
            .limit(limit)
        )
        return [
            DeadLetter(
                identifier=r.identifier,
                request_id=r.request_id,
                tenant_id=r.tenant_id,
                dimension=r.dimension,
                quantity=r.quantity,
                attempts=r.attempts,
                created_at=as_utc(r.created_at),
                dead_at=None if r.dead_at is None else as_utc(r.dead_at),
                reason=r.dead_reason,
            )
            for r in rows
        ]


def customer_ids(db: Engine, tenant_ids: set[str]) -> dict[str, str]:
    """The Stripe customer of each tenant that has one."""
    with Session(db) as s:
        found = s.exec(select(StripeCustomer).where(col(StripeCustomer.tenant_id).in_(tenant_ids)))
        return {c.tenant_id: c.customer_id for c in found}


def tenant_names(db: Engine, tenant_ids: set[str]) -> dict[str, str]:
    with Session(db) as s:
        return {t.id: t.name for t in s.exec(select(Tenant).where(col(Tenant.id).in_(tenant_ids)))}


def save_customer(db: Engine, tenant_id: str, customer_id: str) -> str:
    """Store the tenant's customer; if another replica stored one first, theirs stands and is returned."""
    with Session(db) as s:
        s.add(StripeCustomer(tenant_id=tenant_id, customer_id=customer_id))
        try:
            s.commit()
        except IntegrityError:
            s.rollback()
            stored = s.get(StripeCustomer, tenant_id)
            if stored is None:
                raise
            if stored.customer_id != customer_id:
                logger.warning("tenant %s keeps customer %s; %s is unused", tenant_id, stored.customer_id, customer_id)
            return stored.customer_id
    return customer_id
