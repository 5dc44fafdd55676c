import asyncio
import time
from pathlib import Path

import pytest
import torch

from db.session import make_engine, upgrade
from serving.encoders.cache import CachedEmbedding, EmbeddingCache, cache_key


@pytest.fixture
def db(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield engine
    engine.dispose()


def _entry(seed: int, tokens: int = 6) -> CachedEmbedding:
    g = torch.Generator().manual_seed(seed)
    return CachedEmbedding({"embeds": torch.randn(tokens, 8, generator=g), "grid_thw": torch.tensor([1, 2, 3])}, tokens)


def test_key_uses_full_hashes_and_encoder_identity():
    a = cache_key("enc-a", "f" * 64)
    assert len(a) == 64
    assert a != cache_key("enc-b", "f" * 64)
    assert a != cache_key("enc-a", "f" * 63 + "e")


def test_roundtrip_through_disk_survives_a_new_process_view(tmp_path, db):
    async def run():
        first = EmbeddingCache(tmp_path / "store", db)
        await first.put("k1", "image", "h1", "enc", _entry(1))
        second = EmbeddingCache(tmp_path / "store", db)  # another gateway process on the same machine
        hit = await second.get("k1", "image")
        assert hit is not None
        assert torch.equal(hit.tensors["embeds"], _entry(1).tensors["embeds"])
        assert second.stats.hits_disk == 1
        assert await second.get("k1", "image") is not None
        assert second.stats.hits_memory == 1
        assert await second.get("nope", "image") is None
        assert second.stats.misses == 1

    asyncio.run(run())


def test_memory_tier_is_bounded_in_bytes(tmp_path, db):
    async def run():
        one = _entry(0).nbytes
        cache = EmbeddingCache(tmp_path / "store", db, memory_bytes=one * 2 + 1)
        for i in range(4):
            await cache.put(f"k{i}", "image", f"h{i}", "enc", _entry(i))
        assert cache.memory_bytes() <= one * 2 + 1
        assert cache.stats.evictions == 2
        cache.forget_memory()
        assert (await cache.get("k0", "image")) is not None  # still on disk

    asyncio.run(run())


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_corrupt_entries_are_detected_and_dropped(tmp_path, db, damage):
    async def run():
        cache = EmbeddingCache(tmp_path / "store", db)
        await cache.put("k1", "image", "h1", "enc", _entry(1))
        cache.forget_memory()
        path = next((tmp_path / "store").rglob("*.safetensors"))
        raw = path.read_bytes()
        if damage == "truncate":
            path.write_bytes(raw[: len(raw) // 2])
        elif damage == "flip":
            path.write_bytes(raw[:-8] + bytes(b ^ 0xFF for b in raw[-8:]))
        else:
            path.unlink()
        assert await cache.get("k1", "image") is None
        assert cache.stats.corrupt == 1
        assert not path.exists()
        await cache.put("k1", "image", "h1", "enc", _entry(1))  # replaced by a fresh encode
        cache.forget_memory()
        assert await cache.get("k1", "image") is not None

    asyncio.run(run())


def test_ttl_and_disk_budget_eviction(tmp_path, db):
    async def run():
        short = EmbeddingCache(tmp_path / "store", db, ttl_s=0.05)
        await short.put("old", "image", "h", "enc", _entry(1))
        time.sleep(0.1)
        short.forget_memory()
        assert await short.get("old", "image") is None
        size = _entry(0).nbytes
        small = EmbeddingCache(tmp_path / "store", db, disk_bytes=int(size * 2.9))
        for i in range(4):
            await small.put(f"k{i}", "image", f"h{i}", "enc", _entry(i))
            time.sleep(0.01)
        removed = await small.sweep()
        assert removed >= 1
        small.forget_memory()
        assert await small.get("k3", "image") is not None
        assert await small.get("k0", "image") is None
        assert len(list(Path(tmp_path / "store").rglob("*.safetensors"))) == 4 - removed

    asyncio.run(run())
