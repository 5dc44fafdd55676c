"""Bad keys cost bounded memory and are throttled per client address."""

import asyncio
from types import SimpleNamespace

import pytest

from api.auth import Authenticator, FailureThrottle
from serving.errors import AuthenticationFailed, RateLimited
from tenancy.directory import Directory
from tests.dbs import migrated


@pytest.fixture
def directory(tmp_path):
    for db in migrated("sqlite", tmp_path):
        yield Directory(db, "secret", cache_entries=50)


def _conn(token, host="10.0.0.1"):
    return SimpleNamespace(headers={"authorization": f"Bearer {token}"}, client=SimpleNamespace(host=host))


def test_the_key_cache_stays_bounded_under_a_flood_of_bad_keys(directory):
    tenant = directory.create_tenant("t")
    good = directory.issue_key(tenant.id).key
    assert directory.resolve(good) is not None
    for i in range(500):
        assert directory.resolve(f"sk-tsr-bad-{i}") is None
    assert directory.cache_size == 50
    assert directory.resolve(good) is not None  # evicted or not, a good key still resolves


def test_failed_lookups_are_throttled_per_address(directory):
    tenant = directory.create_tenant("t")
    good = directory.issue_key(tenant.id).key
    auth = Authenticator(directory, None, FailureThrottle(limit=5, window_s=60))

    async def run():
        for i in range(5):
            with pytest.raises(AuthenticationFailed):
                await auth.principal(_conn(f"sk-tsr-bad-{i}"))
        with pytest.raises(RateLimited) as exc:
            await auth.principal(_conn("sk-tsr-bad-next"))
        assert exc.value.retry_after_s > 0
        assert (await auth.principal(_conn(good, host="10.0.0.2"))).tenant_id == tenant.id  # others unaffected

    asyncio.run(run())
