"""`tessera bench pipeline`: the pipeline's worth against the plain path, its live steps, and the run's order."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.common import Progress, check_report, metric, p99, png_data_url, stamp, ttft, unique_text, write_report
from bench.encoders import cache_workload, microbatch
from bench.server import LiveServer, live_server
from config.settings import Settings


@dataclass(frozen=True)
class PipelineSizes:
    microbatch_burst: int = 32
    cache_requests: int = 60
    ttft_rounds: int = 5
    ttft_images: int = 8
    admission_burst: int = 24
    admission_text_streams: int = 12
    admission_burst_tokens: int = 400
    cache_pool: str = "small"


FULL = PipelineSizes()
SMOKE = PipelineSizes(
    microbatch_burst=4,
    cache_requests=6,
    ttft_rounds=1,
    ttft_images=2,
    admission_burst=3,
    admission_text_streams=2,
    admission_burst_tokens=16,
    cache_pool="adm-on",
)


def _live_pools(small_checkpoint: Path, sizes: PipelineSizes) -> list[dict[str, Any]]:
    # About 40 KV blocks of 128 tokens: a burst of three-image requests asks for more KV than the engine has.
    tiny = {"model": str(small_checkpoint), "kv_cache_gib": 0.01, "max_model_len": 2048, "max_num_seqs": 32}
    admission = [{"name": "adm-on", **tiny, "admission": True}, {"name": "adm-off", **tiny, "admission": False}]
    return admission if sizes.cache_pool == "adm-on" else [{"name": sizes.cache_pool}, *admission]


def _media_request(model: str, seeds: list[int], max_tokens: int = 4) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": f"{unique_text()} Describe these."}]
    parts += [{"type": "image_url", "image_url": {"url": png_data_url(s)}} for s in seeds]
    return {
        "model": model,
        "messages": [{"role": "user", "content": parts}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }


async def _warm(server: LiveServer, model: str, seeds: list[int]) -> None:
    async with httpx.AsyncClient(timeout=300) as http:
        await ttft(http, server.base, server.key, _media_request(model, seeds))


def cache_ttft(
    server: LiveServer, progress: Progress, rounds: int = 5, images: int = 8, model: str = "small"
) -> dict[str, Any]:
    """Median TTFT of the same media-heavy request, first (encoder) and again (embedding cache)."""

    async def go() -> tuple[list[float], list[float]]:
        async with httpx.AsyncClient(timeout=300) as http:
            misses, hits = [], []
            for r in range(rounds):
                seeds = [7000 + r * images + i for i in range(images)]
                misses.append(await ttft(http, server.base, server.key, _media_request(model, seeds)))
                hits.append(await ttft(http, server.base, server.key, _media_request(model, seeds)))
            return misses, hits

    asyncio.run(_warm(server, model, [1, 2]))
    hits_before = metric(server.base, "tessera_embedding_cache_lookups_total", kind="image", outcome="hit")
    misses, hits = asyncio.run(go())
    cache_hits = metric(server.base, "tessera_embedding_cache_lookups_total", kind="image", outcome="hit") - hits_before
    miss, hit = statistics.median(misses), statistics.median(hits)
    progress(
        f"  {images}-image request TTFT: miss {miss * 1000:.0f} ms, hit {hit * 1000:.0f} ms (medians); "
        f"{cache_hits:.0f} cache hits"
    )
    return {
        "cache_hit_ttft_ratio": round(hit / miss, 3),
        "cache_ttft_detail": {
            "model": model,
            "images": images,
            "rounds": rounds,
            "miss_ms": round(miss * 1000, 1),
            "hit_ms": round(hit * 1000, 1),
            "cache_hits": int(cache_hits),
        },
    }


def _admission_run(server: LiveServer, model: str, seed_base: int, sizes: PipelineSizes) -> dict[str, Any]:
    text_body = {"model": model, "max_tokens": 4, "temperature": 0}

    async def text_ttfts(http: httpx.AsyncClient) -> list[float]:
        out = []
        for _ in range(sizes.admission_text_streams):
            body = {**text_body, "messages": [{"role": "user", "content": f"Say hello. {unique_text()}"}]}
            out.append(await ttft(http, server.base, server.key, body))
            await asyncio.sleep(0.05)
        return out

    async def go() -> tuple[list[float], list[float]]:
        async with httpx.AsyncClient(timeout=600) as http:
            alone = await text_ttfts(http)
            # Seeds of their own per pool: the embedding cache is shared by the server's pools.
            burst = [
                {
                    **_media_request(
                        model, [seed_base + 3 * i + j for j in range(3)], max_tokens=sizes.admission_burst_tokens
                    ),
                    "priority": "batch",
                }
                for i in range(sizes.admission_burst)
            ]
            tasks = [asyncio.create_task(ttft(http, server.base, server.key, b)) for b in burst]
            await asyncio.sleep(0.5)
            under = await text_ttfts(http)
            await asyncio.gather(*tasks)
            return alone, under

    asyncio.run(_warm(server, model, [seed_base - 2, seed_base - 1]))
    before = metric(server.base, "tessera_engine_preemptions_total", model=model)
    pre_sum = metric(server.base, "tessera_pre_engine_seconds_sum", model=model)
    pre_count = metric(server.base, "tessera_pre_engine_seconds_count", model=model)
    alone, under = asyncio.run(go())
    preemptions = metric(server.base, "tessera_engine_preemptions_total", model=model) - before
    pre_n = metric(server.base, "tessera_pre_engine_seconds_count", model=model) - pre_count
    pre_engine = (metric(server.base, "tessera_pre_engine_seconds_sum", model=model) - pre_sum) / max(1.0, pre_n)
    return {
        "preemptions": int(preemptions),
        "alone_p99_s": p99(alone),
        "under_p99_s": p99(under),
        "pre_engine_mean_s": pre_engine,
    }


def admission(server: LiveServer, progress: Progress, sizes: PipelineSizes = FULL) -> dict[str, Any]:
    """Preemptions and text p99 TTFT under a burst of three-image batch requests, admission on vs off."""
    result: dict[str, Any] = {}
    for n, label in enumerate(("on", "off")):
        run = _admission_run(server, f"adm-{label}", 9000 + 1000 * n, sizes)
        ratio = run["under_p99_s"] / run["alone_p99_s"]
        progress(
            f"  admission {label}: {run['preemptions']} preemptions; text p99 TTFT {run['alone_p99_s'] * 1000:.0f} ms "
            f"alone, {run['under_p99_s'] * 1000:.0f} ms under the burst (x{ratio:.2f}); mean pre-engine time "
            f"{run['pre_engine_mean_s'] * 1000:.0f} ms"
        )
        result[f"preemptions_{label}"] = run["preemptions"]
        result[f"text_p99_ttft_burst_ratio_{label}"] = round(ratio, 3)
        result[f"text_p99_ttft_alone_ms_{label}"] = round(run["alone_p99_s"] * 1000, 1)
        result[f"pre_engine_mean_ms_{label}"] = round(run["pre_engine_mean_s"] * 1000, 1)
    result["burst"] = sizes.admission_burst
    return {"admission": result}


CHECKS = {
    "positive": [
        "microbatch_speedup",
        "cache_encoder_seconds_ratio",
        "cache_hit_ttft_ratio",
        "cache_ttft_detail.cache_hits",
        "admission.text_p99_ttft_burst_ratio_on",
        "admission.text_p99_ttft_burst_ratio_off",
    ],
    "non_negative": ["admission.preemptions_on", "admission.preemptions_off"],
}


def run_pipeline_bench(out: Path, settings: Settings, smoke: bool = False, progress: Progress = print) -> dict:
    """Writes JSON to `out` (after every step) with:

    - microbatch_speedup: vision-pool throughput on a burst of 32 images, micro-batched / one at a time.
    - cache_encoder_seconds_ratio: mean encoder-seconds per request on a 30%-repeat workload, cache / no cache.
    - cache_hit_ttft_ratio: median TTFT of a media-heavy request on an embedding-cache hit / on a miss.
    - admission: preemptions (the engine's own counter) and text-only p99 TTFT under a burst of three-image
      requests / without the burst, with admission on and off.

    The live steps share one server with three pools on the `small` checkpoint: `small` (defaults) for the
    cache, and `adm-on` / `adm-off`, each with a deliberately small KV cache, for admission on and off.
    `--smoke` leaves out `small` (one engine start less) and times the cache on `adm-on`.
    """
    from demo.checkpoints import build_demo_checkpoints

    sizes = SMOKE if smoke else FULL
    models = build_demo_checkpoints(settings.demo_dir(), ["small", "large"], progress=progress)
    report: dict[str, Any] = stamp(smoke)

    def step(i: int, title: str, fn: Callable[[], dict[str, Any]]) -> None:
        progress(f"[{i}/4] {title}")
        started = time.perf_counter()
        report.update(fn())
        progress(f"[{i}/4] done in {time.perf_counter() - started:.0f}s")
        write_report(out, report)

    burst = sizes.microbatch_burst
    step(
        1,
        f"micro-batching (vision tower of 'large', {burst}-image burst)",
        lambda: microbatch(models["large"], progress, burst),
    )
    step(
        2,
        f"embedding cache: encoder-seconds on a 30%-repeat workload of {sizes.cache_requests}",
        lambda: cache_workload(models["large"], progress, requests=sizes.cache_requests),
    )
    progress("starting the live server for steps 3-4")
    with live_server(settings.demo_dir(), _live_pools(models["small"], sizes), progress) as server:
        report["server_startup_s"] = round(server.startup_s, 1)
        step(
            3,
            "embedding cache: TTFT on hit vs miss (live engine)",
            lambda: cache_ttft(
                server, progress, rounds=sizes.ttft_rounds, images=sizes.ttft_images, model=sizes.cache_pool
            ),
        )
        step(
            4,
            "admission under a three-image burst, on vs off (live engines)",
            lambda: admission(server, progress, sizes),
        )
    check_report(report, **CHECKS)
    write_report(out, report)
    progress(f"wrote {out}")
    return report
