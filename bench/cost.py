"""`tessera bench cost`: what a request costs each demo pool, side by side, as the routing policies count it.

The workload is `bench load`'s mixed one (70% text, 20% image, 10% image+audio, its system prompts and media),
sent open loop at one fixed rate to a bare `vllm serve` replica of each pool (`small`, `large`), both started once
and measured in turn (small, large, small, large...), each repeat on schedules of its own seed, the same for both
pools. Every request generates the same number of tokens on both (`ignore_eos`), so what differs is the model.

A request's cost is its **engine seconds**: the time the engine spent prefilling and decoding it, from vLLM's own
`vllm:request_inference_time_seconds` (its sum over the run's requests, over their count). At a rate well below
either pool's capacity few requests overlap, so the sum is close to the time the engine was busy. Beside it the
report gives the replica's CPU seconds per request (the process tree's, over the run) as a second reading. The
ratio of `small`'s engine seconds to `large`'s is `r`, per repeat and as the median with its spread: the routing
policies' cost model takes c_L = 1 and c_S = r. Last, the same `large` replica prices one grounding-judge question
in that unit (`judge_call`, bench/judge_cost.py), which the routing eval charges a judge-gated cascade per question.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.common import BenchFailure, Progress, check_report, metric, spread, stamp, write_report
from bench.fleet_phase import open_loop, warm_up
from bench.fleet_workload import FleetSizes, workload
from bench.judge_cost import QUESTIONS, judge_call_ratio, measure_judge_questions
from bench.load import WORKLOADS, _Bare
from bench.replicas import Replica
from bench.server import free_port
from config.settings import Settings

POOLS = ("small", "large")


@dataclass(frozen=True)
class CostRun:
    requests: int = 20
    rate: float = 0.25  # req/s: about a fifth of what `large` takes here, so few requests overlap
    max_tokens: int = 16  # `bench load`'s
    repeats: int = 3
    seed: int = 2026
    judge_answers: int = 8  # image answers whose judge questions are timed, each case


FULL = CostRun()
SMOKE = CostRun(requests=4, rate=1.0, max_tokens=4, repeats=1, judge_answers=1)


def _sizes(run: CostRun, pool: str, seed: int) -> FleetSizes:
    return FleetSizes(
        requests=run.requests,
        rate=run.rate,
        max_tokens=run.max_tokens,
        tenants=2,
        prompts_per_tenant=2,
        prompt_words=60,
        mix=WORKLOADS["mixed"],
        seed=seed,
        model=pool,
    )


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process and its children so far."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for proc in (root, *root.children(recursive=True)):
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def _measure(replica: Replica, pool: str, run: CostRun, seed: int, progress: Progress) -> dict[str, Any]:
    """One pool's run on one repeat's schedule: engine and CPU seconds per request, and the run's errors."""
    target: Any = _Bare(replica.url)
    sizes = _sizes(run, pool, seed)

    def counters() -> tuple[float, float, float, float]:
        return (
            metric(replica.url, "vllm:request_inference_time_seconds_sum"),
            metric(replica.url, "vllm:request_inference_time_seconds_count"),
            metric(replica.url, "vllm:request_prefill_time_seconds_sum"),
            _cpu_seconds(replica.proc.pid) if replica.proc is not None else 0.0,
        )

    before = counters()
    results, wall_s, late_s = asyncio.run(open_loop(target, ["EMPTY", "EMPTY"], workload(sizes), sizes, progress))
    after = counters()
    errors = [r["error"] for r in results if r.get("error") is not None]
    counted = after[1] - before[1]
    if counted <= 0:
        raise BenchFailure(f"{pool}: the replica counted no finished request ({len(errors)} errors: {errors[:2]})")
    engine_s = (after[0] - before[0]) / counted
    return {
        "requests": len(results),
        "counted": int(counted),
        "errors": len(errors),
        "engine_s_per_request": round(engine_s, 4),
        "prefill_s_per_request": round((after[2] - before[2]) / counted, 4),
        "cpu_s_per_request": round((after[3] - before[3]) / len(results), 4),
        "wall_s": round(wall_s, 1),
        "client_late_s": round(late_s, 3),
    }


def run_cost_bench(
    out: Path,
    settings: Settings,
    *,
    smoke: bool = False,
    rate: float | None = None,
    requests: int | None = None,
    repeats: int | None = None,
    progress: Progress = print,
) -> dict[str, Any]:
    from demo.checkpoints import build_demo_checkpoints

    run = SMOKE if smoke else FULL
    if rate is not None:
        run = replace(run, rate=rate)
    if requests is not None:
        run = replace(run, requests=requests)
    if repeats is not None:
        run = replace(run, repeats=repeats)
    if run.rate <= 0 or run.requests < 1 or run.repeats < 1:
        raise BenchFailure(f"--rate, --requests and --repeats must be positive, got {run}")
    checkpoints = build_demo_checkpoints(settings.demo_dir(), list(POOLS), progress=progress)
    report: dict[str, Any] = {
        **stamp(smoke),
        "workload": {"mix": list(WORKLOADS["mixed"]), **{k: getattr(run, k) for k in ("requests", "rate")}},
        "max_tokens": run.max_tokens,
        "repeats": [],
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tessera-cost-") as logs, ExitStack() as stack:
        replicas = {pool: Replica(checkpoints[pool], pool, free_port(), Path(logs) / f"{pool}.log") for pool in POOLS}
        for pool, replica in replicas.items():
            progress(f"  starting bare vllm serve ({pool})")
            replica.start()
            stack.callback(replica.stop)
        for pool, replica in replicas.items():
            replica.wait_ready()
            bare: Any = _Bare(replica.url)
            asyncio.run(warm_up(bare, ["EMPTY", "EMPTY"], _sizes(run, pool, run.seed)))
        for n in range(run.repeats):
            seed = run.seed + 1000 * n
            progress(f"[{n + 1}/{run.repeats}] {run.requests} requests at {run.rate:g} req/s, schedule seed {seed}")
            pools = {}
            for pool in POOLS:
                pools[pool] = _measure(replicas[pool], pool, run, seed, progress)
                figures = pools[pool]
                progress(
                    f"    {pool}: {figures['engine_s_per_request']:.3f} engine s/request "
                    f"({figures['cpu_s_per_request']:.3f} CPU s), {figures['errors']} errors"
                )
            ratio = pools["small"]["engine_s_per_request"] / pools["large"]["engine_s_per_request"]
            cpu_ratio = pools["small"]["cpu_s_per_request"] / max(pools["large"]["cpu_s_per_request"], 1e-9)
            report["repeats"].append({"seed": seed, "pools": pools, "r": round(ratio, 4), "r_cpu": round(cpu_ratio, 4)})
            write_report(out, report)
        progress(f"judge questions on large: {run.judge_answers} answers of {len(QUESTIONS)} questions, cold and warm")
        judge = measure_judge_questions(replicas["large"], _sizes(run, "large", run.seed), run.judge_answers, progress)
    repeats_done = report["repeats"]
    report["engine_s_per_request"] = {
        pool: spread([r["pools"][pool]["engine_s_per_request"] for r in repeats_done], "per_repeat") for pool in POOLS
    }
    report["r"] = spread([r["r"] for r in repeats_done], "per_repeat")
    report["r_cpu"] = spread([r["r_cpu"] for r in repeats_done], "per_repeat")
    report["judge_questions"] = judge
    report["judge_call"] = judge_call_ratio(judge, report["engine_s_per_request"]["large"]["median"])
    report["bench_s"] = round(time.perf_counter() - started, 1)
    r = report["r"]
    progress(f"  r = small / large engine seconds per request: {r['median']:g} ({r['min']:g}-{r['max']:g})")
    calls = report["judge_call"]
    progress(f"  judge_call = one judge question / one large request: cold {calls['cold']:g}, warm {calls['warm']:g}")
    medians = [f"engine_s_per_request.{p}.median" for p in POOLS]
    check_report(report, positive=["r.median", "judge_call.cold", "judge_call.warm", *medians])
    if any(p["errors"] for rep in repeats_done for p in rep["pools"].values()):
        raise BenchFailure("some requests failed; see the report's errors")
    write_report(out, report)
    progress(f"wrote {out}")
    return report
