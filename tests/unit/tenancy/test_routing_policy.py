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
    with pytest.raises(InvalidRequest, match="routing_policy must be one of heuristic, cascade, weakest, strongest"):
        d.set_quota(tenant.id, routing_policy="cheapest")
    quota = d.quota(tenant.id)
    assert quota is not None
    assert quota.routing_policy == "heuristic"
