"""The pipeline bench's in-process steps: vision micro-batching, and encoder-seconds with the embedding cache."""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import BenchFailure, Progress, pil_image


async def _burst(pool: Any, images: list[Any]) -> float:
    pool.start()
    try:
        started = time.perf_counter()
        await asyncio.gather(*(pool.encode(img) for img in images))
        return time.perf_counter() - started
    finally:
        await pool.close()


def microbatch(checkpoint: Path, progress: Progress, burst: int = 32) -> dict[str, Any]:
    """Throughput of a burst of images through the vision pool, micro-batched vs one at a time."""
    from serving.encoders.pools import VisionEncoderPool

    images = [pil_image(s) for s in range(1000, 1000 + burst)]
    batched = VisionEncoderPool.for_checkpoint(checkpoint, window_ms=12, max_batch=48)
    batched.load()
    single = VisionEncoderPool.for_checkpoint(checkpoint, window_ms=0, max_batch=1)
    single.load()
    batched.encode_batch(images[:2])  # warm both
    single.encode_batch(images[:1])
    t_batched = asyncio.run(_burst(batched, images))
    t_single = asyncio.run(_burst(single, images))
    progress(
        f"  micro-batched: {burst / t_batched:.1f} img/s in {batched.stats.batches - 1} passes; "
        f"one at a time: {burst / t_single:.1f} img/s"
    )
    return {
        "microbatch_speedup": round(t_single / t_batched, 3),
        "microbatch_detail": {"burst": burst, "batched_s": round(t_batched, 3), "single_s": round(t_single, 3)},
    }


def _workload(requests: int, repeat: float) -> list[int]:
    rng = random.Random(7)
    seeds: list[int] = []
    fresh = 5000
    for _ in range(requests):
        if seeds and rng.random() < repeat:
            seeds.append(rng.choice(seeds))
        else:
            fresh += 1
            seeds.append(fresh)
    if requests > 1 and len(set(seeds)) == len(seeds):
        seeds[-1] = seeds[0]  # a tiny (smoke) workload still has a repeat, so the cache's hit path runs
    return seeds


def cache_workload(checkpoint: Path, progress: Progress, requests: int = 60, repeat: float = 0.3) -> dict[str, Any]:
    """Mean encoder-seconds per request on a workload with repeated images, with the embedding cache vs without."""
    from db.session import make_engine, upgrade
    from serving.encoders.cache import CachedEmbedding, EmbeddingCache, cache_key
    from serving.encoders.pools import EncoderFailure, VisionEncoderPool
    from serving.media.images import LoadedImage

    seeds = _workload(requests, repeat)
    images = [LoadedImage(pil_image(s), f"{s:064d}") for s in seeds]
    pool = VisionEncoderPool.for_checkpoint(checkpoint, window_ms=0, max_batch=1)
    pool.load()
    pool.encode_batch([images[0].image])
    hits = 0

    def run(with_cache: bool) -> float:
        nonlocal hits
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/bench.db"
            upgrade(url)
            db = make_engine(url)
            cache = EmbeddingCache(Path(tmp) / "store", db) if with_cache else None
            before = pool.stats.seconds

            async def go() -> None:
                nonlocal hits
                import torch

                for img in images:
                    key = cache_key(pool.identity, img.content_hash)
                    if cache is not None and await cache.get(key, "image") is not None:
                        hits += 1
                        continue
                    emb = pool.encode_batch([img.image])[0]
                    if isinstance(emb, EncoderFailure):
                        raise emb
                    if cache is not None:
                        entry = CachedEmbedding(
                            {"embeds": emb.embeds, "grid_thw": torch.tensor(emb.grid_thw)}, emb.tokens
                        )
                        await cache.put(key, "image", img.content_hash, pool.identity, entry)

            asyncio.run(go())
            db.dispose()
            return (pool.stats.seconds - before) / len(images)

    without = run(False)
    with_cache = run(True)
    repeats = len(seeds) - len(set(seeds))
    if hits != repeats:
        raise BenchFailure(f"the embedding cache answered {hits} of {repeats} repeated images")
    progress(
        f"  {requests} requests, {repeats} repeats: {with_cache * 1000:.1f} ms encoder per request with the "
        f"cache, {without * 1000:.1f} ms without"
    )
    return {
        "cache_encoder_seconds_ratio": round(with_cache / without, 3),
        "cache_workload_detail": {"requests": requests, "repeats": repeats, "cache_hits": hits},
    }
