"""One phase of `tessera bench fleet`: a fresh gateway with one policy, its warm-up, and the open-loop workload.

`tessera bench load` and `tessera bench batch` drive their servers with the same open loop and summaries.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.common import BenchFailure, Progress, metric, stream_chat
from bench.fleet_workload import CLASSES, MODEL, FleetSizes, Job, request_body, warmup_jobs
from bench.plot import quantile
from bench.server import BENCH_CONCURRENT_REQUESTS, BENCH_TOKENS_PER_MINUTE, LiveServer, live_server


def tenant_keys(server: LiveServer, count: int) -> list[str]:
    """Fresh tenants on this gateway (new ids, so new prefix-cache salts), each with a key."""
    keys = []
    with httpx.Client(base_url=server.base, headers=server.admin_headers, timeout=30) as http:
        for i in range(count):
            limits = {"tokens_per_minute": BENCH_TOKENS_PER_MINUTE, "concurrent_requests": BENCH_CONCURRENT_REQUESTS}
            created = http.post("/admin/tenants", json={"name": f"fleet-{i}", **limits})
            if created.status_code != 201:
                raise BenchFailure(f"POST /admin/tenants answered {created.status_code}: {created.text[:300]}")
            issued = http.post(f"/admin/tenants/{created.json()['id']}/keys", json={})
            if issued.status_code != 201:
                raise BenchFailure(f"POST .../keys answered {issued.status_code}: {issued.text[:300]}")
            keys.append(str(issued.json()["key"]))
    return keys


def _outcome(job: Job, run: dict[str, Any]) -> dict[str, Any]:
    usage = run["usage"] or {}
    details = usage.get("prompt_tokens_details") or {}
    completion = int(usage.get("completion_tokens") or 0)
    decode_s = run["total_s"] - run["ttft_s"]
    return {
        "kind": job.kind,
        "job": job,
        "ttft_s": run["ttft_s"],
        "total_s": run["total_s"],
        "tpot_s": decode_s / (completion - 1) if completion > 1 and run["first"] is not None else None,
        "prompt_tokens": int(usage.get("prompt_tokens") or 0),
        "cached_tokens": int(details.get("cached_tokens") or 0),
        "cached_media_tokens": sum(int(details.get(f"cached_{m}_tokens") or 0) for m in ("image", "audio")),
        "error": None if run["usage"] else "the stream had no usage",
    }


async def _send(http: httpx.AsyncClient, server: LiveServer, key: str, job: Job, body: dict[str, Any]) -> dict:
    try:
        return _outcome(job, await stream_chat(http, server.base, key, body))
    except (BenchFailure, httpx.HTTPError) as exc:
        return {"kind": job.kind, "job": job, "error": f"{type(exc).__name__}: {exc}"[:300]}


async def warm_up(server: LiveServer, keys: list[str], sizes: FleetSizes) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=600) as http:
        return [await _send(http, server, keys[j.tenant], j, request_body(j, sizes)) for j in warmup_jobs(sizes)]


async def open_loop(
    server: LiveServer, keys: list[str], jobs: Sequence[Job], sizes: FleetSizes, progress: Progress
) -> tuple[list[dict[str, Any]], float, float]:
    """Sends each job at its arrival time, whatever is still running. Returns the outcomes, the wall time and
    the worst lateness of a send against its schedule (the client keeping up)."""
    bodies = [request_body(j, sizes) for j in jobs]  # media encoded before the clock starts
    limits = httpx.Limits(max_connections=len(jobs) + 16, max_keepalive_connections=64)
    done, late = 0, 0.0
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        started = time.perf_counter()

        async def one(job: Job, body: dict[str, Any]) -> dict[str, Any]:
            nonlocal done, late
            await asyncio.sleep(max(0.0, started + job.at_s - time.perf_counter()))
            late = max(late, time.perf_counter() - started - job.at_s)
            result = await _send(http, server, keys[job.tenant], job, body)
            done += 1
            if done % max(1, len(jobs) // 4) == 0 or done == len(jobs):
                progress(f"    {done}/{len(jobs)} done at {time.perf_counter() - started:.0f}s")
            return result

        results = await asyncio.gather(*(one(j, b) for j, b in zip(jobs, bodies, strict=True)))
        return list(results), time.perf_counter() - started, late


def latency_summary(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, float | int]]:
    """TTFT p50/p90/p99 and TPOT p50 (ms) per class and overall."""
    out: dict[str, dict[str, float | int]] = {}
    for kind in (*CLASSES, "overall"):
        rows = [r for r in results if kind in ("overall", r["kind"])]
        if not rows:
            continue
        ttfts = [r["ttft_s"] * 1000 for r in rows]
        tpots = [r["tpot_s"] * 1000 for r in rows if r["tpot_s"] is not None]
        out[kind] = {
            "n": len(rows),
            "ttft_p50_ms": round(quantile(ttfts, 0.5), 1),
            "ttft_p90_ms": round(quantile(ttfts, 0.9), 1),
            "ttft_p99_ms": round(quantile(ttfts, 0.99), 1),
            "tpot_p50_ms": round(quantile(tpots, 0.5), 1) if tpots else 0.0,
        }
    return out


def _counters(server: LiveServer, urls: Sequence[str]) -> dict[str, Any]:
    """What the phase's deltas are taken from: the gateway's picks and cache lookups, the replicas' own
    prefix-cache counters (tokens)."""
    health = httpx.get(server.base + "/health", timeout=30).json()
    rows = {r["url"]: r for r in health["engines"][MODEL].get("replicas", [])}
    lookups = "tessera_embedding_cache_lookups_total"
    return {
        "picks": {u: (rows[u]["picks"], rows[u]["affinity_picks"]) for u in urls},
        "prefix": {
            u: (metric(u, "vllm:prefix_cache_queries_total"), metric(u, "vllm:prefix_cache_hits_total")) for u in urls
        },
        "embedding": {
            f"{kind}_{outcome}": metric(server.base, lookups, kind=kind, outcome=outcome)
            for kind in ("image", "audio")
            for outcome in ("hit", "miss")
        },
    }


def replica_deltas(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for url, (picks, affinity) in after["picks"].items():
        queries = after["prefix"][url][0] - before["prefix"][url][0]
        hits = after["prefix"][url][1] - before["prefix"][url][1]
        out[url] = {
            "picks": picks - before["picks"][url][0],
            "affinity_picks": affinity - before["picks"][url][1],
            "prefix_cache_queries": int(queries),
            "prefix_cache_hits": int(hits),
            "prefix_cache_hit_rate": round(hits / queries, 4) if queries > 0 else 0.0,
        }
    return out


def _hit_rate(before: dict[str, Any], after: dict[str, Any]) -> float:
    """Prefix-cache hits over queries (tokens) of every replica over the phase."""
    queries = sum(after["prefix"][u][0] - before["prefix"][u][0] for u in after["prefix"])
    hits = sum(after["prefix"][u][1] - before["prefix"][u][1] for u in after["prefix"])
    return round(hits / queries, 4) if queries > 0 else 0.0


def check_fresh_caches(policy: str, warm: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Nothing may carry over from an earlier phase. Each text warm-up is the first request of its system prompt
    under a fresh tenant (a new cache salt), so the replicas may not report a prefix hit for it; each media
    warm-up is its medium's first in this gateway, so its embedding cache may not report a hit."""
    errors = [r["error"] for r in warm if r["error"]]
    if errors:
        raise BenchFailure(f"{policy}: warm-up failed: {errors[0]}")
    texts = [r for r in warm if r["kind"] == "text"]
    carried = [r["cached_tokens"] for r in texts if r["cached_tokens"]]
    carried += [r["cached_media_tokens"] for r in warm if r["cached_media_tokens"]]
    if carried:
        raise BenchFailure(
            f"{policy}: a first request reported {carried[0]} cached tokens: a cache carried over from an earlier "
            "phase or was shared with another client"
        )
    return {"warmup_requests": len(warm), "text_prompt_tokens": min(r["prompt_tokens"] for r in texts)}


def _ejections(server: LiveServer) -> int:
    """Replica ejections the gateway has logged so far (it logs each at WARNING, the bench server's level)."""
    return server.log_path.read_text(errors="replace").count(" ejected for ")


def run_phase(
    policy: str, models_dir: Path, urls: Sequence[str], sizes: FleetSizes, jobs: Sequence[Job], progress: Progress
) -> tuple[dict[str, Any], list[float]]:
    """One policy against a fresh gateway: warm-up, then the open-loop workload. Returns its report (failed
    requests counted, the rest measured) and the TTFTs in ms."""
    pools = [{"name": MODEL, "replicas": list(urls)}]
    with live_server(models_dir, pools, progress, env={"TESSERA_FLEET_POLICY": policy}) as server:
        keys = tenant_keys(server, sizes.tenants)
        fresh = check_fresh_caches(policy, asyncio.run(warm_up(server, keys, sizes)))
        before, ejected = _counters(server, urls), _ejections(server)
        results, wall, late = asyncio.run(open_loop(server, keys, jobs, sizes, progress))
        after, ejected = _counters(server, urls), _ejections(server) - ejected
        startup = server.startup_s
    ok = [r for r in results if not r["error"]]
    if not ok:
        raise BenchFailure(f"{policy}: every request failed; the first: {results[0]['error']}")
    embedding = {k: int(after["embedding"][k] - before["embedding"][k]) for k in after["embedding"]}
    report = {
        "server_startup_s": round(startup, 1),
        "wall_s": round(wall, 1),
        "achieved_rate_per_s": round(len(results) / wall, 3),
        "mean_in_flight": round(sum(r["total_s"] for r in ok) / wall, 2),  # Little's law over the phase
        "worst_send_lateness_ms": round(late * 1000, 1),
        "errors": len(results) - len(ok),
        "error_samples": sorted({r["error"] for r in results if r["error"]})[:3],
        "replica_ejections": ejected,
        "latency": latency_summary(ok),
        "replicas": replica_deltas(before, after),
        "embedding_cache": embedding,
        "prefix_cache_hit_rate": _hit_rate(before, after),
        "requests_with_prefix_hits": sum(1 for r in ok if r["cached_tokens"]),
        # Hits are whole KV blocks: more cached tokens than a text request's whole prompt reach into the media.
        "repeats_with_media_prefix_hits": sum(
            1 for r in ok if r["job"].repeat and r["cached_tokens"] > fresh["text_prompt_tokens"]
        ),
        "fresh_cache_check": {**fresh, "passed": True},
    }
    return report, [r["ttft_s"] * 1000 for r in ok]


def print_phase(policy: str, phase: dict[str, Any], progress: Progress) -> None:
    for kind, row in phase["latency"].items():
        progress(
            f"  {policy:11s} {kind:11s} n={row['n']:3d}  TTFT p50 {row['ttft_p50_ms']:6.0f}  p90 "
            f"{row['ttft_p90_ms']:6.0f}  p99 {row['ttft_p99_ms']:6.0f} ms   TPOT p50 {row['tpot_p50_ms']:5.0f} ms"
        )
    for url, row in phase["replicas"].items():
        progress(
            f"  {policy:11s} {url}: {row['picks']} picks ({row['affinity_picks']} by affinity), prefix-cache hit "
            f"rate {row['prefix_cache_hit_rate']:.0%}"
        )
    emb = phase["embedding_cache"]
    progress(
        f"  {policy:11s} embedding cache: {emb['image_hit']} image / {emb['audio_hit']} audio hits; "
        f"{phase['replica_ejections']} replica ejections; {phase['errors']} failed requests"
    )
