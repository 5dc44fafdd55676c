"""`tessera bench fleet`: the endpoint picker against round robin on the same replicas, under one open-loop load.

Both policies replay the same seeded workload (arrival times and requests): 70% text, 20% image, 10% image and
audio; 30% of the media requests repeat an earlier medium in the same tenant's conversation; every request
carries one of many tenants' long system prompts. The replicas' KV caches are shrunk so that one replica cannot
hold every shared prefix, but half of them fit with room to spare: keeping each prefix on one replica (affinity)
is then what decides whether a request's prefill is served from the cache.

Each policy runs against a fresh gateway of its own (its own data dir, so its own embedding cache and tenants,
whose cache salts keep the replicas' prefix caches apart), and the policies alternate, picker then round robin,
for several rounds on the same replicas. The verdict is the median over rounds of each round's ratio, with its
spread; the TTFT CDF pools every round's requests.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from bench.common import BenchFailure, Progress, check_report, spread, stamp, write_report
from bench.fleet_phase import print_phase, run_phase
from bench.fleet_workload import FULL, MODEL, SMOKE, FleetSizes, describe, workload
from bench.plot import draw_cdf, quantile
from config.settings import Settings

POLICIES = ("picker", "round_robin")
TARGET_P99_RATIO = 0.8  # the picker's TTFT p99 at most this fraction of round robin's
TARGET_P50_RATIO = 1.05  # and its median no more than 5% worse
MiB = 1 << 20


@dataclass(frozen=True)
class FleetPlan:
    """The workload, how many alternated rounds of it, and the KV cache of each replica the bench starts."""

    sizes: FleetSizes
    rounds: int
    replica_kv_bytes: int


FULL_PLAN = FleetPlan(FULL, rounds=3, replica_kv_bytes=64 * MiB)
SMOKE_PLAN = FleetPlan(SMOKE, rounds=1, replica_kv_bytes=16 * MiB)


@contextmanager
def replica_urls(
    settings: Settings, given: Sequence[str] | None, kv_cache_bytes: int, progress: Progress
) -> Iterator[list[str]]:
    """The replicas to measure on: the given URLs (each must answer /health), or two of our own with
    `kv_cache_bytes` of KV cache each."""
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
    progress(f"starting two vllm replicas of the small demo checkpoint, {kv_cache_bytes / MiB:.0f} MiB KV cache each")
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="tessera-fleet-") as logs,
        running_replicas(checkpoints[MODEL], MODEL, 2, Path(logs), kv_cache_bytes=kv_cache_bytes) as replicas,
    ):
        progress(f"  replicas up in {time.perf_counter() - started:.0f}s: {', '.join(r.url for r in replicas)}")
        yield [r.url for r in replicas]


def replica_capacity_tokens(url: str) -> int:
    """The tokens a replica's KV cache holds, from its own `/metrics` (`vllm:cache_config_info`)."""
    from serving.engines.replica_metrics import parse_vllm_metrics

    scraped = parse_vllm_metrics(httpx.get(url + "/metrics", timeout=30).text, time.monotonic())
    if not scraped.num_gpu_blocks or not scraped.block_size:
        raise BenchFailure(f"replica {url} does not report its KV-cache size (vllm:cache_config_info)")
    return scraped.num_gpu_blocks * scraped.block_size


def prefix_pressure(sizes: FleetSizes, phase: dict[str, Any], capacities: Sequence[int]) -> dict[str, Any]:
    """Whether affinity can matter: the shared prefixes' tokens against one replica's KV cache. Above 1, one
    replica cannot hold them all, so a policy that sends every prefix to every replica evicts them, while one
    that keeps each prefix on its replica needs only its share there."""
    prompts = sizes.tenants * sizes.prompts_per_tenant
    each = phase["fresh_cache_check"]["text_prompt_tokens"]  # a text request's whole prompt: the prefix and a question
    total = prompts * each
    return {
        "distinct_prefixes": prompts,
        "prompt_tokens_each": each,
        "prefix_tokens_total": total,
        "replica_kv_capacity_tokens": list(capacities),
        "prefixes_over_one_replica": round(total / min(capacities), 2),
        # What each replica holds when every prefix stays on one of them: well under 1 leaves room for the rest.
        "their_share_over_one_replica": round(total / len(capacities) / min(capacities), 2),
    }


def verdict(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each round's picker / round-robin TTFT ratios (overall), and the target judged on their medians."""
    ratios: dict[str, list[float]] = {"ttft_p50": [], "ttft_p99": []}
    for round_ in rounds:
        pick, rr = (round_[p]["latency"]["overall"] for p in POLICIES)
        for name, values in ratios.items():
            values.append(pick[f"{name}_ms"] / rr[f"{name}_ms"])
    p50, p99 = statistics.median(ratios["ttft_p50"]), statistics.median(ratios["ttft_p99"])
    met = p99 <= TARGET_P99_RATIO and p50 <= TARGET_P50_RATIO
    return {
        "ratios": {f"{name}_picker_over_round_robin": spread(values, "per_round") for name, values in ratios.items()},
        "target": {
            "ttft_p99_ratio_max": TARGET_P99_RATIO,
            "ttft_p50_ratio_max": TARGET_P50_RATIO,
            "met": met,
            "summary": f"the picker {'met' if met else 'missed'} the target over {len(rounds)} rounds: TTFT p99 "
            f"x{p99:.2f} of round robin's, median of {', '.join(f'{v:.2f}' for v in ratios['ttft_p99'])} (target "
            f"<= x{TARGET_P99_RATIO}); p50 x{p50:.2f}, median of {', '.join(f'{v:.2f}' for v in ratios['ttft_p50'])} "
            f"(target <= x{TARGET_P50_RATIO})",
        },
    }


def pooled(results: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Every round's requests together, per policy: a p99 of thousands of samples."""
    return {
        policy: {
            "n": len(ttfts),
            "ttft_p50_ms": round(quantile(ttfts, 0.5), 1),
            "ttft_p99_ms": round(quantile(ttfts, 0.99), 1),
        }
        for policy, ttfts in results.items()
    }


def run_fleet_bench(
    out: Path,
    settings: Settings,
    smoke: bool = False,
    replicas: Sequence[str] | None = None,
    requests: int | None = None,
    rate: float | None = None,
    rounds: int | None = None,
    replica_kv_mib: float | None = None,
    plot: Path | None = None,
    progress: Progress = print,
) -> dict[str, Any]:
    """Writes to `out`: the workload and the prefix pressure; per round and policy, TTFT p50/p90/p99 and TPOT
    p50 per class and overall, each replica's picks, affinity picks and prefix-cache hit rate, and the
    embedding-cache hits; the median picker / round-robin TTFT ratios with their spread, and whether the target
    was met. Fails if a phase had a failed request."""
    plan = SMOKE_PLAN if smoke else FULL_PLAN
    sizes = replace(plan.sizes, requests=requests or plan.sizes.requests, rate=rate or plan.sizes.rate)
    plan = replace(
        plan,
        sizes=sizes,
        rounds=rounds or plan.rounds,
        replica_kv_bytes=round(replica_kv_mib * MiB) if replica_kv_mib else plan.replica_kv_bytes,
    )
    jobs = workload(sizes)
    report: dict[str, Any] = {**stamp(smoke), "workload": describe(sizes, jobs), "rounds": []}
    ttfts: dict[str, list[float]] = {p: [] for p in POLICIES}
    started = time.perf_counter()
    with replica_urls(settings, replicas, plan.replica_kv_bytes, progress) as urls:
        capacities = [replica_capacity_tokens(u) for u in urls]
        report["replicas"] = {"urls": urls, "own": not replicas, "kv_capacity_tokens": capacities}
        phases = [(r, p) for r in range(plan.rounds) for p in POLICIES]  # A B A B ...
        for i, (round_no, policy) in enumerate(phases, 1):
            progress(f"[{i}/{len(phases)}] round {round_no + 1}, {policy}: {len(jobs)} requests at {sizes.rate}/s")
            phase_started = time.perf_counter()
            phase, phase_ttfts = run_phase(policy, settings.demo_dir(), urls, sizes, jobs, progress)
            if round_no == len(report["rounds"]):
                report["rounds"].append({})
            report["rounds"][round_no][policy] = phase
            ttfts[policy] += phase_ttfts
            if "prefix_pressure" not in report:
                report["prefix_pressure"] = prefix_pressure(sizes, phase, capacities)
            print_phase(policy, phase, progress)
            progress(f"[{i}/{len(phases)}] done in {time.perf_counter() - phase_started:.0f}s")
            write_report(out, report)
    report.update(verdict(report["rounds"]))
    report["pooled"] = pooled(ttfts)
    report["bench_s"] = round(time.perf_counter() - started, 1)
    pressure = report["prefix_pressure"]
    progress(
        f"  {pressure['distinct_prefixes']} prefixes of {pressure['prompt_tokens_each']} tokens: "
        f"x{pressure['prefixes_over_one_replica']} of one replica's KV cache"
    )
    progress(f"  {report['target']['summary']}")
    check_report(
        report,
        positive=[
            *(f"pooled.{p}.{f}" for p in POLICIES for f in ("ttft_p50_ms", "ttft_p99_ms")),
            "ratios.ttft_p50_picker_over_round_robin.median",
            "ratios.ttft_p99_picker_over_round_robin.median",
        ],
    )
    write_report(out, report)
    progress(f"wrote {out}")
    if plot is not None:
        draw_cdf(plot, ttfts, f"TTFT CDF: picker vs round robin, {plan.rounds} alternated rounds, same replicas")
        progress(f"wrote {plot}")
    failed = {
        f"round {n + 1} {p}": r[p]["errors"] for n, r in enumerate(report["rounds"]) for p in POLICIES if r[p]["errors"]
    }
    if failed:
        first = next(r[p]["error_samples"][0] for r in report["rounds"] for p in POLICIES if r[p]["errors"])
        raise BenchFailure(f"failed requests: {failed}; the first: {first}")
    return report
