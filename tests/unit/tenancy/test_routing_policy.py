"""A tenant's routing policy: stored on its quota (migration 0020), carried on its callers' identity, validated."""

import pytest

from serving.errors import InvalidRequest
from tenancy.directory import Directory
from tenancy.limits import InProcessLimiter
from tenancy.quotas import QuotaGate
from tests.dbs import migrated


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    yield from migrated(request.param, tmp_path)


def test_the_policy_defaults_to_the_heuristic_and_reaches_the_callers_identity(db):
    d = Directory(db, "s")
    tenant = d.create_tenant("routed")
    principal = d.resolve(d.issue_key(tenant.id).key)
    gate = QuotaGate(InProcessLimiter(), db)
    assert gate.policy(principal).identity.routing_policy == "heuristic"
    assert d.set_quota(tenant.id, routing_policy="cascade").routing_policy == "cascade"
    principal = d.resolve(d.issue_key(tenant.id).key)
    assert gate.policy(principal).identity.routing_policy == "cascade"


def test_an_unknown_policy_is_refused_and_changes_nothing(db):
    d = Directory(db, "s")
    tenant = d.create_tenant("routed")
    expected = "routing_policy must be one of heuristic, cascade, router, weakest, strongest"
    with pytest.raises(InvalidRequest, match=expected):
        d.set_quota(tenant.id, routing_policy="cheapest")
    quota = d.quota(tenant.id)
    assert quota is not None
    assert quota.routing_policy == "heuristic"


def test_a_second_attempt_is_linked_on_both_receipts_and_counted_per_pool(db):
    import asyncio
    from dataclasses import replace
    from datetime import timedelta

    from billing.prices import PriceBook
    from db.models import utcnow
    from serving.policy import CallerIdentity
    from serving.record import OpenedRequest
    from tenancy.metering import aggregate, receipt
    from tenancy.usage_log import UsageJournal
    from tests.unit.tenancy.test_usage_journal import _record

    tenant = Directory(db, "s").create_tenant("cascading").id
    journal = UsageJournal(db, PriceBook(db))
    caller = CallerIdentity(tenant, "k")
    first = OpenedRequest(
        "req-a", "small", frozenset({"text", "image"}), caller, 40, 54, 0, route_reason="cascade: first attempt"
    )
    second = replace(
        first,
        request_id="req-b",
        model="large",
        route_reason="cascade: escalated from small (grounding failed)",
        attempt_of="req-a",
    )

    async def run():
        for opened in (first, second):
            await journal.open(opened)
            await journal.close(replace(_record(opened.request_id, tenant), model=opened.model))

    asyncio.run(run())
    a, b = receipt(db, tenant, "req-a"), receipt(db, tenant, "req-b")
    assert a is not None
    assert b is not None
    assert (a["route_reason"], a["attempt_of"]) == ("cascade: first attempt", None)
    assert a["followed_by"] == [
        {"request_id": "req-b", "model": "large", "cost_micros": b["cost_micros"], "status": "completed"}
    ]
    assert (b["attempt_of"], b["followed_by"]) == ("req-a", [])
    assert b["route_reason"].startswith("cascade: escalated")
    assert receipt(db, "another tenant", "req-a") is None
    now = utcnow()
    rows = {r["model"]: r for r in aggregate(db, tenant, now - timedelta(hours=1), now + timedelta(hours=1), "model")}
    assert (rows["small"]["second_attempts"], rows["large"]["second_attempts"]) == (0, 1)
