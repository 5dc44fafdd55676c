"""A key revoked on one gateway stops working on every other within a poll interval; a lookup that races a
revocation is not cached; replacing TESSERA_API_KEY revokes the old operator key."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from config.settings import Settings
from tenancy.directory import Directory
from tenancy.revocations import VERSION_KEY, ChangeFeed
from tessera.state import setup_tenancy
from tests.dbs import migrated

REDIS_URL = "redis://127.0.0.1:6379/7"


@pytest.fixture
def db(tmp_path):
    redis.Redis.from_url(REDIS_URL).delete(VERSION_KEY)
    yield from migrated("sqlite", tmp_path)


def test_a_revocation_reaches_another_gateway_within_a_second(db):
    async def run() -> tuple[bool, float | None, int]:
        a, b = Directory(db, "secret"), Directory(db, "secret")
        tenant = a.create_tenant("acme")
        issued = a.issue_key(tenant.id)
        feeds = [ChangeFeed(REDIS_URL, d, interval_s=0.25) for d in (a, b)]
        for f in feeds:
            await f.start()
        try:
            cached_before = await asyncio.to_thread(b.resolve, issued.key) is not None
            revoked = time.monotonic()
            await asyncio.to_thread(a.revoke_key, issued.key_id)
            gone_after = None
            while time.monotonic() - revoked < 5:
                if await asyncio.to_thread(b.resolve, issued.key) is None:
                    gone_after = time.monotonic() - revoked
                    break
                await asyncio.sleep(0.02)
            return cached_before, gone_after, feeds[1].refreshes
        finally:
            for f in feeds:
                await f.close()

    cached_before, gone_after, refreshes = asyncio.run(run())
    assert cached_before
    assert gone_after is not None
    assert gone_after < 1.0, f"the other gateway accepted the revoked key for {gone_after:.2f} s"
    assert refreshes >= 1


def test_without_the_feed_the_other_gateway_would_keep_the_key(db):
    """The control for the test above: the cache alone keeps a revoked key for its lifetime."""
    a, b = Directory(db, "secret"), Directory(db, "secret")
    tenant = a.create_tenant("acme")
    issued = a.issue_key(tenant.id)
    assert b.resolve(issued.key) is not None
    a.revoke_key(issued.key_id)
    assert b.resolve(issued.key) is not None


def test_a_lookup_racing_a_revocation_is_not_cached(db, monkeypatch):
    d = Directory(db, "secret")
    tenant = d.create_tenant("acme")
    issued = d.issue_key(tenant.id)
    load = d._load

    def load_then_revoke(digest: str):
        principal = load(digest)  # read before the revocation commits ...
        d.revoke_key(issued.key_id)  # ... which lands before the result is cached
        return principal

    monkeypatch.setattr(d, "_load", load_then_revoke)
    assert d.resolve(issued.key) is not None  # this one request saw the key before it was revoked
    monkeypatch.setattr(d, "_load", load)
    assert d.resolve(issued.key) is None


def test_replacing_the_operator_key_revokes_the_old_one(db, tmp_path):
    url = db.url.render_as_string(hide_password=False)
    first = Settings(data_dir=tmp_path, database_url=url, api_key="sk-operator-one", key_secret="s")
    directory, key, _ = setup_tenancy(first, db)
    assert directory.resolve(key) is not None
    second = Settings(data_dir=tmp_path, database_url=url, api_key="sk-operator-two", key_secret="s")
    directory, key, _ = setup_tenancy(second, db)
    assert directory.resolve("sk-operator-two") is not None
    assert directory.resolve("sk-operator-one") is None
    again, _, _ = setup_tenancy(second, db)  # restarting with the same key keeps it
    assert again.resolve("sk-operator-two") is not None


def test_the_feed_closes_promptly_whenever_it_is_stopped(db):
    """A poll in flight when the server stops must not hang it: cancelling a Redis command mid-write left its task
    waiting forever in most tries, and a stopping gateway waited until it was killed (60 s in the test harness)."""
    import uvloop

    async def run() -> list[float]:
        took = []
        for i in range(20):
            feed = ChangeFeed(REDIS_URL, Directory(db, "secret"), interval_s=0.0)  # polling back to back
            await feed.start()
            await asyncio.sleep(0.003 * i)
            started = time.monotonic()
            await asyncio.wait_for(feed.close(), 10)
            took.append(time.monotonic() - started)
            assert feed._task is not None
            assert feed._task.done()
        return took

    took = uvloop.run(run())
    assert max(took) < 2.0, took
