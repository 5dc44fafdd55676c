"""What the outbox worker does with a meter event: the retry policy, Stripe failure verdicts and idempotency keys.

Pure functions of their inputs (no I/O), so the table of outcomes can be tested row by row.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

# Stripe refuses meter events whose timestamp is more than 35 calendar days in the past.
STRIPE_METER_EVENT_WINDOW = timedelta(days=35)

# 4xx codes that describe a momentary state on Stripe's side rather than something wrong with the event.
RETRYABLE_CODES = frozenset({"lock_timeout", "rate_limit", "idempotency_key_in_use"})


@dataclass(frozen=True)
class OutboxPolicy:
    """How much the worker claims and sends at once, how long a claim lasts and how failures back off."""

    batch: int = 100  # rows claimed in one transaction
    concurrency: int = 10  # meter events in flight at once, per worker
    lease_s: float = 120.0  # a claim expires after this; a crashed worker's rows are then claimable again
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 300.0
    max_age: timedelta = STRIPE_METER_EVENT_WINDOW


class Verdict(enum.Enum):
    SENT = "sent"
    RETRY = "retry"  # same idempotency key: the first attempt's outcome is unknown (network) or not yet saved
    RETRY_NEW_KEY = "retry_new_key"  # Stripe may have saved this answer under the key; ask afresh
    DEAD = "dead"  # Stripe will never accept it


@dataclass(frozen=True)
class Failure:
    """A Stripe answer other than success, reduced to what the verdict depends on."""

    status: int | None  # None: no HTTP answer (timeout, connection refused or reset)
    code: str | None = None
    error_type: str | None = None
    should_retry: bool | None = None  # Stripe's `Stripe-Should-Retry` header, when it sent one
    message: str = ""


def classify(failure: Failure) -> Verdict:
    """Whether a failed send is retried, and with which idempotency key, or dead-lettered.

    Only a 400 or 404 that Stripe does not mark retryable is permanent. 401/402/403 are our configuration (the API
    key, the account), not the event's fault: dead-lettering every event because a key was rotated would drop
    revenue, so they back off like an outage. Stripe saves a v1 response under its idempotency key once the
    endpoint began executing, 500s included, so after a 5xx the next try uses a new key; the event's
    `identifier` still makes Stripe count it once.
    """
    if failure.code == "resource_already_exists" or "already exists" in failure.message:
        return Verdict.SENT  # Stripe already recorded this identifier: an earlier attempt got through
    if failure.should_retry is True or failure.code in RETRYABLE_CODES:
        return Verdict.RETRY
    if failure.status is None or failure.status in (409, 429):
        return Verdict.RETRY
    if failure.error_type == "idempotency_error":
        return Verdict.RETRY_NEW_KEY  # a key reused with other parameters; a fresh key is the documented fix
    if failure.status >= 500:
        return Verdict.RETRY_NEW_KEY
    if failure.status in (400, 404):
        return Verdict.DEAD
    return Verdict.RETRY


def backoff_s(policy: OutboxPolicy, attempts: int, rng: random.Random | None = None) -> float:
    """Exponential in the row's attempts, capped, with jitter in [half, full] so rows failed together spread out."""
    ceiling = min(policy.backoff_cap_s, policy.backoff_base_s * 2 ** max(0, attempts - 1))
    return ceiling * (0.5 + 0.5 * (rng or random).random())


def as_utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def expired(policy: OutboxPolicy, created_at: datetime, now: datetime) -> bool:
    return now - as_utc(created_at) > policy.max_age


def meter_idempotency_key(identifier: str, generation: int) -> str:
    """Stable per outbox row; the generation moves on only after an answer Stripe may have saved (a 5xx)."""
    return f"tessera-meter-{identifier}" if generation == 0 else f"tessera-meter-{identifier}-g{generation}"


def customer_idempotency_key(tenant_id: str) -> str:
    return f"tessera-customer-{tenant_id}"


def meter_definition_idempotency_key(event_name: str) -> str:
    return f"tessera-meter-definition-{event_name}"
