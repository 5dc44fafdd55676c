"""A grounding judge's caller policy: the tenant's key, its monthly budgets, but neither its rate limits nor its
model list, and its own answer never scored."""

import asyncio

import pytest

from serving.errors import RateLimited
from serving.policy import CallerIdentity
from serving.record import TokenUsage
from tenancy.directory import Directory
from tenancy.limits import InProcessLimiter
from tenancy.quotas import QuotaGate, judge_callers
from tests.dbs import migrated


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    yield from migrated(request.param, tmp_path)


def _tokens(n: int) -> TokenUsage:
    return TokenUsage(prompt=n, text=n)


def test_a_tenant_at_its_concurrency_limit_is_still_judged(db):
    d = Directory(db, "s")
    tenant = d.create_tenant("judged", concurrency=1)
    d.set_quota(tenant.id, grounding_policy="flag", grounding_evidence="judge")
    issued = d.issue_key(tenant.id, allowed_models=["small"])
    principal = d.resolve(issued.key)
    gate = QuotaGate(InProcessLimiter(), db)

    async def run():
        answering = await gate.policy(principal).reserve("small", _tokens(10))  # the tenant's one slot
        with pytest.raises(RateLimited):
            await gate.policy(principal).reserve("small", _tokens(10))
        questions = await judge_callers(d, gate)(CallerIdentity(tenant.id, issued.key_id))
        assert questions is not None
        caller = questions("grnd-1")
        await caller.precheck()
        caller.check_model("large")  # the judge pool is the operator's choice, not the key's
        judging = await caller.reserve("large", _tokens(10))
        await judging.settle(_tokens(3))
        await answering.settle(_tokens(5))
        identity = caller.identity
        assert (identity.request_id, identity.grounding_policy, identity.priority) == ("grnd-1", "off", "interactive")
        assert identity.tenant_id == tenant.id
        assert gate.policy(principal).identity.grounding_evidence == "judge"
        assert await judge_callers(d, gate)(CallerIdentity(tenant.id, None)) is None

    asyncio.run(run())


def test_evidence_must_be_one_of_the_providers(db):
    from serving.errors import InvalidRequest

    d = Directory(db, "s")
    tenant = d.create_tenant("evidence")
    with pytest.raises(InvalidRequest, match="grounding_evidence must be one of label_head, judge, both"):
        d.set_quota(tenant.id, grounding_evidence="oracle")
