"""`tessera bench fleet`: the endpoint picker against round robin on the same replicas, under one open-loop load.

Both policies get the same seeded workload (arrival times and requests): 70% text, 20% image, 10% image and
audio; 30% of the media requests repeat an earlier medium in the same tenant's conversation; every request
carries one of a few tenants' long system prompts. Each policy runs against a fresh gateway of its own (its own
data dir, so its own embedding cache and tenants, whose cache salts keep the replicas' prefix caches apart).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    BenchFailure,
    Progress,
    check_report,
    metric,
    stamp,
    stream_chat,
    write_report,
)
from bench.fleet_workload import (
    CLASSES,
    FULL,
    MODEL,
    SMOKE,
    FleetSizes,
    Job,
    describe,
    request_body,
    warmup_jobs,
    workload,
)
from bench.plot import draw_cdf, quantile
from bench.server import BENCH_CONCURRENT_REQUESTS, BENCH_TOKENS_PER_MINUTE, LiveServer, live_server
from config.settings import Settings

POLICIES = ("picker", "round_robin")
TARGET_P99_RATIO = 0.8  # the picker's TTFT p99 at most this fraction of round robin's
TARGET_P50_RATIO = 1.05  # and its median no more than 5% worse


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
        "requests_with_prefix_hits": sum(1 for r in ok if r["cached_tokens"]),
        # Hits are whole KV blocks: more cached tokens than a text request's whole prompt reach into the media.
        "repeats_with_media_prefix_hits": sum(
            1 for r in ok if r["job"].repeat and r["cached_tokens"] > fresh["text_prompt_tokens"]
        ),
        "fresh_cache_check": {**fresh, "passed": True},
    }
    return report, [r["ttft_s"] * 1000 for r in ok]


@contextmanager
def replica_urls(settings: Settings, given: Sequence[str] | None, progress: Progress) -> Iterator[list[str]]:
    """The replicas to measure on: the given URLs (each must answer /health), or two of our own."""
    from bench.replicas import running_replicas
    from demo.checkpoints import build_demo_checkpoints

    checkpoints = build_demo_checkpoints(settings.demo_dir(), [MODEL], progress=progress)
    if given:
        for url in given:
            try:
                status = httpx.get(url.rstrip("/") + "/health", timeout=10).status_code
            except httpx.HTTPError as exc:
                raise BenchFailure(f"replica {url} does not answer: {exc}") from exc
            if status != 200:
                raise BenchFailure(f"replica {url} answered /health with {status}")
        yield [u.rstrip("/") for u in given]
        return
    progress("starting two vllm replicas of the small demo checkpoint")
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="tessera-fleet-") as logs,
        running_replicas(checkpoints[MODEL], MODEL, 2, Path(logs)) as replicas,
    ):
        progress(f"  replicas up in {time.perf_counter() - started:.0f}s: {', '.join(r.url for r in replicas)}")
        yield [r.url for r in replicas]


def verdict(report: dict[str, Any]) -> dict[str, Any]:
    pick, rr = (report["policies"][p]["latency"]["overall"] for p in POLICIES)
    p50, p99 = pick["ttft_p50_ms"] / rr["ttft_p50_ms"], pick["ttft_p99_ms"] / rr["ttft_p99_ms"]
    met = p99 <= TARGET_P99_RATIO and p50 <= TARGET_P50_RATIO
    ratios = {"ttft_p50_picker_over_round_robin": round(p50, 3), "ttft_p99_picker_over_round_robin": round(p99, 3)}
    return {
        "ratios": ratios,
        "target": {
            "ttft_p99_ratio_max": TARGET_P99_RATIO,
            "ttft_p50_ratio_max": TARGET_P50_RATIO,
            "met": met,
            "summary": f"the picker {'met' if met else 'missed'} the target: TTFT p99 x{p99:.2f} of round robin's "
            f"(target <= x{TARGET_P99_RATIO}), p50 x{p50:.2f} (target <= x{TARGET_P50_RATIO})",
        },
    }


def _print_phase(policy: str, phase: dict[str, Any], progress: Progress) -> None:
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


def run_fleet_bench(
    out: Path,
    settings: Settings,
    smoke: bool = False,
    replicas: Sequence[str] | None = None,
    requests: int | None = None,
    rate: float | None = None,
    plot: Path | None = None,
    progress: Progress = print,
) -> dict[str, Any]:
    """Writes to `out`: the workload; per policy, TTFT p50/p90/p99 and TPOT p50 per class and overall, each
    replica's picks, affinity picks and prefix-cache hit rate over the phase, and the embedding-cache hits; the
    picker / round-robin TTFT ratios and whether the target was met. Fails if a phase had a failed request."""
    sizes = SMOKE if smoke else FULL
    sizes = replace(sizes, requests=requests or sizes.requests, rate=rate or sizes.rate)
    jobs = workload(sizes)
    report: dict[str, Any] = {**stamp(smoke), "workload": describe(sizes, jobs), "policies": {}}
    ttfts: dict[str, list[float]] = {}
    started = time.perf_counter()
    with replica_urls(settings, replicas, progress) as urls:
        report["replicas"] = {"urls": urls, "own": not replicas}
        for i, policy in enumerate(POLICIES, 1):
            progress(f"[{i}/2] {policy}: {len(jobs)} requests at {sizes.rate}/s on {len(urls)} replicas")
            phase_started = time.perf_counter()
            report["policies"][policy], ttfts[policy] = run_phase(
                policy, settings.demo_dir(), urls, sizes, jobs, progress
            )
            _print_phase(policy, report["policies"][policy], progress)
            progress(f"[{i}/2] done in {time.perf_counter() - phase_started:.0f}s")
            write_report(out, report)
    report.update(verdict(report))
    report["bench_s"] = round(time.perf_counter() - started, 1)
    progress(f"  {report['target']['summary']}")
    check_report(
        report,
        positive=[
            *(f"policies.{p}.latency.overall.{f}" for p in POLICIES for f in ("ttft_p50_ms", "ttft_p99_ms")),
            "ratios.ttft_p50_picker_over_round_robin",
            "ratios.ttft_p99_picker_over_round_robin",
        ],
    )
    write_report(out, report)
    progress(f"wrote {out}")
    if plot is not None:
        draw_cdf(plot, ttfts, "TTFT CDF: picker vs round robin, same workload and replicas")
        progress(f"wrote {plot}")
    failed = {p: report["policies"][p]["errors"] for p in POLICIES if report["policies"][p]["errors"]}
    if failed:
        first = next(report["policies"][p]["error_samples"][0] for p in failed)
        raise BenchFailure(f"failed requests per policy: {failed}; the first: {first}")
    return report
