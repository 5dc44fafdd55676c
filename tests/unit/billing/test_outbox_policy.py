"""The outbox policy as a table: what becomes of each Stripe answer, how retries back off, what is too old."""

import random
from datetime import UTC, datetime, timedelta

import pytest

from billing.outbox_policy import (
    Failure,
    OutboxPolicy,
    Verdict,
    backoff_s,
    classify,
    customer_idempotency_key,
    expired,
    meter_idempotency_key,
)

R, NEW, DEAD, SENT = Verdict.RETRY, Verdict.RETRY_NEW_KEY, Verdict.DEAD, Verdict.SENT


@pytest.mark.parametrize(
    ("failure", "verdict"),
    [
        (Failure(status=None, message="timed out"), R),  # outcome unknown: same key, so a replay can tell
        (Failure(status=None, message="connection refused"), R),
        (Failure(status=500, error_type="api_error"), NEW),  # Stripe may have saved the 500 under the key
        (Failure(status=502), NEW),
        (Failure(status=503, should_retry=False), NEW),  # never give up on revenue over an outage
        (Failure(status=429, code="rate_limit", error_type="invalid_request_error"), R),
        (Failure(status=409, code="idempotency_key_in_use", error_type="idempotency_error"), R),
        (Failure(status=409, code="lock_timeout"), R),
        (Failure(status=400, error_type="idempotency_error"), NEW),  # same key, other parameters
        (Failure(status=400, code="resource_already_exists", error_type="invalid_request_error"), SENT),
        (Failure(status=400, code=None, message="An event with identifier x already exists."), SENT),
        (Failure(status=400, code="timestamp_too_far_in_past", error_type="invalid_request_error"), DEAD),
        (Failure(status=400, code="parameter_invalid_integer"), DEAD),
        (Failure(status=404, code="resource_missing"), DEAD),
        (Failure(status=400, code="lock_timeout"), R),  # a retryable code is retried whatever the status
        (Failure(status=400, code="parameter_missing", should_retry=True), R),  # Stripe says so
        (Failure(status=401, code="api_key_expired"), R),  # our configuration, not the event's fault
        (Failure(status=403), R),
        (Failure(status=402), R),
    ],
)
def test_verdict(failure, verdict):
    assert classify(failure) is verdict


def test_backoff_doubles_per_attempt_with_jitter_and_a_cap():
    policy = OutboxPolicy(backoff_base_s=0.5, backoff_cap_s=300.0)
    rng = random.Random(7)
    for attempts, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (6, 16.0), (10, 256.0), (11, 300.0), (40, 300.0)]:
        delays = [backoff_s(policy, attempts, rng) for _ in range(200)]
        assert ceiling / 2 <= min(delays) < max(delays) <= ceiling
        assert max(delays) - min(delays) > ceiling / 4  # rows that failed together do not retry together


def test_expired_is_past_stripes_35_day_window():
    policy = OutboxPolicy()
    now = datetime(2026, 12, 3, 12, tzinfo=UTC)
    assert not expired(policy, now - timedelta(days=35), now)
    assert expired(policy, now - timedelta(days=35, seconds=1), now)
    assert expired(policy, (now - timedelta(days=36)).replace(tzinfo=None), now)  # SQLite's naive UTC


def test_idempotency_keys_are_stable_and_distinct():
    assert meter_idempotency_key("chatcmpl-1:image", 0) == meter_idempotency_key("chatcmpl-1:image", 0)
    assert meter_idempotency_key("chatcmpl-1:image", 1) != meter_idempotency_key("chatcmpl-1:image", 0)
    assert meter_idempotency_key("chatcmpl-1:image", 0) != meter_idempotency_key("chatcmpl-1:audio", 0)
    assert customer_idempotency_key("t1") == customer_idempotency_key("t1") != customer_idempotency_key("t2")
    assert len(meter_idempotency_key("x" * 96, 99)) <= 255  # Stripe's limit on keys
