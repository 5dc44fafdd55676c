"""`tessera bench pipeline`: the pipeline's worth against the plain path, measured side by side in one run.

Writes JSON with:
- microbatch_speedup: vision-pool throughput on a burst of 32 images, micro-batched / one at a time.
- cache_hit_ttft_ratio: median TTFT of a media-heavy request on an embedding-cache hit / on a miss (live engine).
- cache_encoder_seconds_ratio: mean encoder-seconds per request on a 30%-repeat workload, cache / no cache.
- admission: preemptions (the engine's own counter) and text-only p99 TTFT under a burst of three-image
  requests / without the burst, with admission on and off (live engines).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from api.settings import Settings

KEY = "sk-bench"
Progress = Callable[[str], None]


def _png_data_url(seed: int, size: tuple[int, int] = (320, 240)) -> str:
    import base64
    import io

    import numpy as np
    from PIL import Image

    arr = (np.random.default_rng(seed).random((size[1], size[0], 3)) * 255).astype("uint8")
    buf = io.BytesIO()
    Image.fromarray(arr, "RGB").save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _images(seeds: list[int]) -> list[Any]:
    import numpy as np
    from PIL import Image

    return [
        Image.fromarray((np.random.default_rng(s).random((240, 320, 3)) * 255).astype("uint8"), "RGB") for s in seeds
    ]


# -- in-process parts ---------------------------------------------------------------------------------


async def _burst(pool: Any, images: list[Any]) -> float:
    pool.start()
    try:
        started = time.perf_counter()
        await asyncio.gather(*(pool.encode(img) for img in images))
        return time.perf_counter() - started
    finally:
        await pool.close()


def microbatch(checkpoint: Path, progress: Progress, burst: int = 32) -> dict[str, Any]:
    from serving.encoders import VisionEncoderPool

    images = _images(list(range(1000, 1000 + burst)))
    batched = VisionEncoderPool(checkpoint, window_ms=12, max_batch=48)
    batched.load()
    single = VisionEncoderPool(checkpoint, window_ms=0, max_batch=1)
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


def cache_workload(checkpoint: Path, progress: Progress, requests: int = 60, repeat: float = 0.3) -> dict[str, Any]:
    from db.session import make_engine, upgrade
    from serving.cache import CachedEmbedding, EmbeddingCache, cache_key
    from serving.encoders import EncoderFailure, VisionEncoderPool
    from serving.media.images import LoadedImage

    rng = random.Random(7)
    seeds: list[int] = []
    fresh = 5000
    for _ in range(requests):
        if seeds and rng.random() < repeat:
            seeds.append(rng.choice(seeds))
        else:
            fresh += 1
            seeds.append(fresh)
    images = [LoadedImage(img, f"{s:064d}") for img, s in zip(_images(seeds), seeds, strict=True)]
    pool = VisionEncoderPool(checkpoint, window_ms=0, max_batch=1)
    pool.load()
    pool.encode_batch([images[0].image])

    def run(with_cache: bool) -> float:
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/bench.db"
            upgrade(url)
            db = make_engine(url)
            cache = EmbeddingCache(Path(tmp) / "store", db) if with_cache else None
            before = pool.stats.seconds

            async def go() -> None:
                import torch

                for img in images:
                    key = cache_key(pool.identity, img.content_hash)
                    if cache is not None and await cache.get(key, "image") is not None:
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
    progress(
        f"  {requests} requests, {repeats} repeats: {with_cache * 1000:.1f} ms encoder per request with the "
        f"cache, {without * 1000:.1f} ms without"
    )
    return {
        "cache_encoder_seconds_ratio": round(with_cache / without, 3),
        "cache_workload_detail": {"requests": requests, "repeats": repeats},
    }


# -- live servers -------------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def live_server(models_dir: Path, pool: dict[str, Any] | list[dict[str, Any]], progress: Progress) -> Iterator[str]:
    pools = pool if isinstance(pool, list) else [pool]
    port = _free_port()
    with tempfile.TemporaryDirectory() as data:
        env = {
            **os.environ,
            "TESSERA_API_KEY": KEY,
            "TESSERA_PORT": str(port),
            "TESSERA_DATA_DIR": data,
            "TESSERA_MODELS_DIR": str(models_dir),
            "TESSERA_POOLS": json.dumps(pools),
            "TESSERA_LOG_LEVEL": "WARNING",
        }
        log = Path(data) / "server.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "api", "serve"], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise RuntimeError(f"bench server exited:\n{log.read_text()[-2000:]}")
                try:
                    if httpx.get(base + "/health", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            else:
                raise RuntimeError("bench server did not become healthy in 300 s")
            for p in pools:
                settings = ", ".join(f"{k}={v}" for k, v in p.items() if k != "name")
                progress(f"  server up: pool {p['name']} ({settings})")
            yield base
        finally:
            proc.terminate()
            proc.wait(timeout=60)


async def _ttft(http: httpx.AsyncClient, base: str, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    async with http.stream(
        "POST", base + "/v1/chat/completions", json={**body, "stream": True}, headers={"authorization": f"Bearer {KEY}"}
    ) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"bench request failed: {resp.status_code} {await resp.aread()!r}")
        first = None
        async for line in resp.aiter_lines():
            if first is None and '"content":"' in line and '"content":""' not in line:
                first = time.perf_counter() - started
        return first if first is not None else time.perf_counter() - started


def _metric(base: str, name: str) -> float:
    total = 0.0
    for line in httpx.get(base + "/metrics", timeout=30).text.splitlines():
        if line.startswith((name + "{", name + " ")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _media_request(nonce: int, seeds: list[int], max_tokens: int = 4) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": f"Request {nonce}: describe these."}]
    parts += [{"type": "image_url", "image_url": {"url": _png_data_url(s)}} for s in seeds]
    return {
        "model": "small",
        "messages": [{"role": "user", "content": parts}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }


def cache_ttft(models_dir: Path, progress: Progress, rounds: int = 5, images: int = 8) -> dict[str, Any]:
    async def go(base: str) -> tuple[list[float], list[float]]:
        async with httpx.AsyncClient(timeout=120) as http:
            misses, hits = [], []
            for r in range(rounds):
                seeds = [7000 + r * images + i for i in range(images)]
                misses.append(await _ttft(http, base, _media_request(time.perf_counter_ns(), seeds)))
                hits.append(await _ttft(http, base, _media_request(time.perf_counter_ns(), seeds)))
            return misses, hits

    with live_server(models_dir, {"name": "small"}, progress) as base:
        asyncio.run(_ttft_warm(base))
        misses, hits = asyncio.run(go(base))
    miss, hit = statistics.median(misses), statistics.median(hits)
    progress(f"  {images}-image request TTFT: miss {miss * 1000:.0f} ms, hit {hit * 1000:.0f} ms (medians)")
    return {
        "cache_hit_ttft_ratio": round(hit / miss, 3),
        "cache_ttft_detail": {"images": images, "miss_ms": round(miss * 1000, 1), "hit_ms": round(hit * 1000, 1)},
    }


async def _ttft_warm(base: str) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        await _ttft(http, base, _media_request(0, [1, 2]))


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def admission(models_dir: Path, progress: Progress, burst: int = 24, text_streams: int = 12) -> dict[str, Any]:
    text_body = {
        "model": "small",
        "max_tokens": 4,
        "temperature": 0,
        "messages": [{"role": "user", "content": "Say hello."}],
    }

    async def text_ttfts(http: httpx.AsyncClient, base: str) -> list[float]:
        out = []
        for _ in range(text_streams):
            out.append(
                await _ttft(
                    http,
                    base,
                    {**text_body, "messages": [{"role": "user", "content": f"Say hello {time.perf_counter_ns()}."}]},
                )
            )
            await asyncio.sleep(0.05)
        return out

    async def go(base: str) -> tuple[list[float], list[float]]:
        async with httpx.AsyncClient(timeout=600) as http:
            alone = await text_ttfts(http, base)
            burst_reqs = [
                {
                    **_media_request(
                        time.perf_counter_ns(), [9000 + 3 * i, 9001 + 3 * i, 9002 + 3 * i], max_tokens=400
                    ),
                    "priority": "batch",
                }
                for i in range(burst)
            ]
            tasks = [asyncio.create_task(_ttft(http, base, b)) for b in burst_reqs]
            await asyncio.sleep(0.5)
            under = await text_ttfts(http, base)
            await asyncio.gather(*tasks)
            return alone, under

    result: dict[str, Any] = {}
    # A deliberately small KV cache (about 40 blocks of 128 tokens), so a burst of three-image requests
    # asks for more KV than the engine has.
    for label, enabled in (("on", True), ("off", False)):
        pool = {"name": "small", "kv_cache_gib": 0.01, "max_model_len": 2048, "admission": enabled, "max_num_seqs": 32}
        with live_server(models_dir, pool, progress) as base:
            asyncio.run(_ttft_warm(base))
            before = _metric(base, "tessera_engine_preemptions_total")
            alone, under = asyncio.run(go(base))
            preemptions = _metric(base, "tessera_engine_preemptions_total") - before
            pre_engine = _metric(base, "tessera_pre_engine_seconds_sum") / max(
                1.0, _metric(base, "tessera_pre_engine_seconds_count")
            )
        ratio = _p99(under) / _p99(alone)
        progress(
            f"  admission {label}: {preemptions:.0f} preemptions; text p99 TTFT {_p99(alone) * 1000:.0f} ms "
            f"alone, {_p99(under) * 1000:.0f} ms under the burst (x{ratio:.2f}); mean pre-engine time "
            f"{pre_engine * 1000:.0f} ms"
        )
        result[f"preemptions_{label}"] = int(preemptions)
        result[f"text_p99_ttft_burst_ratio_{label}"] = round(ratio, 3)
    return {"admission": result}


def run_pipeline_bench(out: Path, settings: Settings, progress: Progress = print) -> dict[str, Any]:
    from serving.demo_models import build_demo_checkpoints

    models = build_demo_checkpoints(settings.demo_dir(), ["small", "large"], progress=progress)
    report: dict[str, Any] = {"started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    steps = [
        ("micro-batching (vision tower of 'large', 32-image burst)", lambda: microbatch(models["large"], progress)),
        (
            "embedding cache: encoder-seconds on a 30%-repeat workload",
            lambda: cache_workload(models["large"], progress),
        ),
        ("embedding cache: TTFT on hit vs miss (live engine)", lambda: cache_ttft(settings.demo_dir(), progress)),
        (
            "admission under a three-image burst, on vs off (live engines)",
            lambda: admission(settings.demo_dir(), progress),
        ),
    ]
    for i, (title, step) in enumerate(steps, 1):
        progress(f"[{i}/{len(steps)}] {title}")
        started = time.perf_counter()
        report.update(step())
        progress(f"[{i}/{len(steps)}] done in {time.perf_counter() - started:.0f}s")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))
    progress(f"wrote {out}")
    return report
