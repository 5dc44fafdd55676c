"""MediaEncoder's path through the embedding cache: concurrent requests for one medium share one encoding."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from serving.encoders.cache import CachedEmbedding
from serving.encoders.encoding import MediaEncoder


class _Cache:
    """An embedding cache that never hits, and whose writes can be made to fail."""

    def __init__(self, fail_puts: bool = False) -> None:
        self.puts = 0
        self.fail_puts = fail_puts

    async def get(self, key: str, kind: str, valid: Any) -> CachedEmbedding | None:
        return None

    async def put(self, key: str, kind: str, content_hash: str, identity: str, entry: CachedEmbedding) -> None:
        self.puts += 1
        if self.fail_puts:
            raise RuntimeError("database is locked")


def _encoder(cache: _Cache | None) -> MediaEncoder:
    return MediaEncoder(ingest=None, cache=cache)  # type: ignore[arg-type]


async def _through(
    encoder: MediaEncoder, calls: list[int], release: asyncio.Event, fail: bool = False
) -> tuple[Any, bool]:
    async def encode() -> str:
        calls.append(1)
        await release.wait()
        if fail:
            raise ValueError("tower failed")
        return "embedding"

    return await encoder._through_cache(
        "image",
        "encoder-1",
        "sha-of-the-image",
        None,
        valid=lambda hit: True,
        unpack=lambda hit: hit,
        encode=encode,
        pack=lambda v: CachedEmbedding({}, 1),
    )


@pytest.mark.parametrize("with_cache", [True, False])
def test_concurrent_requests_for_one_medium_encode_it_once(with_cache):
    async def run() -> tuple[list[tuple[Any, bool]], list[int], _Cache | None]:
        cache = _Cache() if with_cache else None
        encoder, calls, release = _encoder(cache), [], asyncio.Event()
        tasks = [asyncio.create_task(_through(encoder, calls, release)) for _ in range(5)]
        await asyncio.sleep(0.01)
        release.set()
        return await asyncio.gather(*tasks), calls, cache

    results, calls, cache = asyncio.run(run())
    assert len(calls) == 1
    assert [v for v, _ in results] == ["embedding"] * 5
    assert sorted(shared for _, shared in results) == [False, True, True, True, True]
    if cache is not None:
        assert cache.puts == 1


def test_a_failed_encoding_fails_its_waiters_and_is_not_remembered():
    async def run() -> tuple[list[Any], list[int], tuple[Any, bool]]:
        encoder, calls, release = _encoder(_Cache()), [], asyncio.Event()
        tasks = [asyncio.create_task(_through(encoder, calls, release, fail=True)) for _ in range(3)]
        await asyncio.sleep(0.01)
        release.set()
        failed = await asyncio.gather(*tasks, return_exceptions=True)
        again = asyncio.Event()
        again.set()
        return failed, calls, await _through(encoder, calls, again)

    failed, calls, retried = asyncio.run(run())
    assert all(isinstance(f, ValueError) for f in failed)
    assert len(calls) == 2
    assert retried == ("embedding", False)


def test_a_cancelled_encoding_lets_a_waiter_encode_for_itself():
    async def run() -> tuple[tuple[Any, bool], list[int]]:
        encoder, calls, release = _encoder(None), [], asyncio.Event()
        first = asyncio.create_task(_through(encoder, calls, release))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(_through(encoder, calls, release))
        await asyncio.sleep(0.01)
        first.cancel()
        await asyncio.sleep(0.01)
        release.set()
        return await second, calls

    result, calls = asyncio.run(run())
    assert result == ("embedding", False)
    assert len(calls) == 2


def test_a_failed_cache_write_does_not_fail_the_request():
    async def run() -> tuple[Any, bool]:
        release = asyncio.Event()
        release.set()
        return await _through(_encoder(_Cache(fail_puts=True)), [], release)

    assert asyncio.run(run()) == ("embedding", False)


def test_cache_entries_are_private_to_a_tenant_unless_the_medium_is_pinned():
    from serving.encoders.cache import CacheScope, cache_key

    a, b = CacheScope("salt-a", frozenset({"logo"})), CacheScope("salt-b", frozenset({"logo"}))
    assert cache_key("enc", "photo", a.of("photo")) != cache_key("enc", "photo", b.of("photo"))
    assert cache_key("enc", "logo", a.of("logo")) == cache_key("enc", "logo", b.of("logo")) == cache_key("enc", "logo")


def test_a_shared_salt_never_covers_a_system_prompt():
    from serving.ingest import MessagePlan
    from serving.pipeline import Pipeline

    pipeline = Pipeline(None, None, max_images=8, pinned_media={"logo"}, shared_cache_salt="everyone")  # type: ignore[arg-type]
    bare = MessagePlan([{"role": "user", "content": [{"type": "image"}]}], [])
    system = MessagePlan([{"role": "system", "content": "Acme's secret rules"}, *bare.messages], [])
    assert pipeline.cache_salt("tenant", {"logo"}, bare) == "everyone"
    assert pipeline.cache_salt("tenant", {"logo"}, system) == "tenant"
    assert pipeline.cache_salt("tenant", {"logo", "photo"}, bare) == "tenant"


@pytest.mark.parametrize(
    ("messages", "tools", "salt"),
    [
        ([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what is it?"}]}], None, "everyone"),
        ([{"role": "user", "content": [{"type": "audio"}]}], None, "everyone"),
        (  # a second pinned medium later in the conversation: only what follows the first one is the caller's
            [
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and now?"}]},
                {"role": "assistant", "content": "a logo"},
                {"role": "user", "content": [{"type": "image"}]},
            ],
            None,
            "everyone",
        ),
        (  # tool definitions, which templates render into the system block ahead of the medium
            [{"role": "user", "content": [{"type": "image"}]}],
            [{"type": "function", "function": {"name": "acme_lookup_customer", "parameters": {}}}],
            "tenant",
        ),
        (  # earlier turns before the first medium
            [
                {"role": "user", "content": "Our Q3 numbers are confidential"},
                {"role": "assistant", "content": "Understood"},
                {"role": "user", "content": [{"type": "image"}]},
            ],
            None,
            "tenant",
        ),
        (  # the caller's text ahead of the medium in the same message
            [{"role": "user", "content": [{"type": "text", "text": "Acme's brief:"}, {"type": "image"}]}],
            None,
            "tenant",
        ),
        ([{"role": "assistant", "content": "Hello"}, {"role": "user", "content": [{"type": "image"}]}], None, "tenant"),
    ],
)
def test_a_shared_salt_never_covers_tools_earlier_turns_or_text_before_the_first_medium(messages, tools, salt):
    from serving.ingest import MessagePlan
    from serving.pipeline import Pipeline

    pipeline = Pipeline(None, None, max_images=8, pinned_media={"logo"}, shared_cache_salt="everyone")  # type: ignore[arg-type]
    assert pipeline.cache_salt("tenant", {"logo"}, MessagePlan(messages, []), tools) == salt
