"""`tessera bench batch`: what a batch draining in the engines' idle time costs interactive traffic, and how fast it
drains against the engine's own pace.

On one live server (the `small` pool, embedded engine), with the fleet bench's mixed workload (70% text, 20% image,
10% image and audio, tenants' long system prompts, `max_tokens` 32):

1. The interactive rate: half of the server's goodput, the highest rate of a ladder of open-loop Poisson rates at
   which TTFT p99 stays within 250 ms (or the rate given with `--rate`).
2. Rounds (3), each side by side:
   - direct: the batch's lines sent straight to `/v1/chat/completions`, as fast as the engine allows (many at
     once), with no other traffic: the engine's throughput in lines per second;
   - alone: the interactive workload at that rate: TTFT p50/p99;
   - with a batch: the same schedule again while a batch of such lines (media of its own) drains, counting the
     requests sent before it completed; the batch's throughput is its lines over its running time.

Each round gives the TTFT p99 (and p50) with the batch over the one without, and the batch's throughput over the
direct run's; the report gives their median over the rounds with the spread, against the targets (at most 1.15x,
at least 0.7x).
"""

from __future__ import annotations

import asyncio
import io
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from bench.common import BenchFailure, Progress, check_report, stamp, stream_chat, write_report
from bench.fleet_phase import latency_summary, open_loop, tenant_keys, warm_up
from bench.fleet_workload import MODEL, FleetSizes, Job, request_body, workload
from bench.server import LiveServer, live_server
from config.settings import Settings

GOODPUT_TTFT_P99_MS = 250.0
TARGET_P99_RATIO = 1.15
TARGET_THROUGHPUT_RATIO = 0.7
MEDIA_OFFSET = 100_000  # the batch's media are not the direct run's (no embedding-cache head start)


@dataclass(frozen=True)
class BatchSizes:
    lines: int = 500
    interactive: int = 150  # requests in each interactive phase
    max_tokens: int = 32
    ladder: tuple[float, ...] = (2.0, 4.0, 8.0, 16.0, 32.0, 48.0)
    ladder_requests: int = 60
    rounds: int = 3  # each: the direct run, interactive alone, interactive beside a batch
    direct_concurrency: int = 32
    batch_timeout_s: float = 1800.0


FULL = BatchSizes()
# The smoke's batch must outlast its 8 interactive requests (sent over one second at 8/s): 40 lines of the `small`
# pool drained within the second the phase began, and a batch's `completed_at` counts whole seconds.
SMOKE = BatchSizes(lines=160, interactive=8, max_tokens=8, ladder=(), ladder_requests=0, rounds=1, batch_timeout_s=300)
SMOKE_RATE = 8.0  # the smoke's 8 interactive requests are all sent while its batch drains


def _fleet_sizes(sizes: BatchSizes, requests: int, rate: float, seed: int) -> FleetSizes:
    return FleetSizes(requests=requests, rate=rate, max_tokens=sizes.max_tokens, seed=seed)


def _phase(
    server: LiveServer,
    keys: list[str],
    jobs: list[Job],
    sizes: FleetSizes,
    progress: Progress,
    sent_before: Callable[[], float] | None = None,
) -> dict:
    """The open-loop workload's TTFT; with `sent_before` (seconds after the phase's start, known once it ended),
    only over the requests sent before then."""
    started = time.time()
    results, wall, late = asyncio.run(open_loop(server, keys, jobs, sizes, progress))
    if sent_before is not None:
        cutoff = sent_before() - started
        results = [r for r in results if r["job"].at_s < cutoff]
        if not results:
            raise BenchFailure("the batch ended before any interactive request was sent: give it more lines")
    ok = [r for r in results if not r["error"]]
    by_class = latency_summary(ok) if ok else {}
    summary = by_class.pop("overall", {})
    return {
        "requests": len(results),
        "errors": len(results) - len(ok),
        "error_samples": sorted({r["error"] for r in results if r["error"]})[:3],
        "wall_s": round(wall, 1),
        "worst_send_lateness_ms": round(late * 1000, 1),
        **summary,
        "by_class": by_class,
    }


def _goodput(server: LiveServer, keys: list[str], sizes: BatchSizes, progress: Progress) -> dict[str, Any]:
    """The highest rate of the ladder whose TTFT p99 stays within the target, with every step's figures."""
    steps, best = [], None
    for n, rate in enumerate(sizes.ladder):
        fleet = _fleet_sizes(sizes, sizes.ladder_requests, rate, seed=3000 + n)
        progress(f"  ladder: {rate:g} req/s")
        step = {"rate_per_s": rate, **_phase(server, keys, workload(fleet), fleet, progress)}
        steps.append(step)
        if step["errors"] or step.get("ttft_p99_ms", float("inf")) > GOODPUT_TTFT_P99_MS:
            break
        best = rate
    return {"ttft_p99_limit_ms": GOODPUT_TTFT_P99_MS, "goodput_per_s": best, "ladder": steps}


def _lines(sizes: BatchSizes, media_offset: int) -> list[dict[str, Any]]:
    """The batch's requests: the mixed workload's kinds and prompts, `max_tokens` of them each; media seeds shifted
    by `media_offset`, so no run finds another's media in the embedding cache."""
    fleet = _fleet_sizes(sizes, sizes.lines, 1.0, seed=4242)
    shifted = [
        replace(
            j,
            image=None if j.image is None else j.image + media_offset,
            audio=None if j.audio is None else j.audio + media_offset,
        )
        for j in workload(fleet)
    ]
    return [request_body(j, fleet) for j in shifted]


async def _direct(server: LiveServer, bodies: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    """Every body sent at once (up to `concurrency` in flight): the engine's own pace, in lines per second."""
    slots = asyncio.Semaphore(concurrency)
    errors: list[str] = []
    limits = httpx.Limits(max_connections=concurrency + 8)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:

        async def one(body: dict[str, Any]) -> None:
            async with slots:
                try:
                    await stream_chat(http, server.base, server.key, body)
                except (BenchFailure, httpx.HTTPError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}"[:300])

        started = time.perf_counter()
        await asyncio.gather(*(one(b) for b in bodies))
        wall = time.perf_counter() - started
    return {
        "lines": len(bodies),
        "concurrency": concurrency,
        "errors": len(errors),
        "error_samples": errors[:3],
        "wall_s": round(wall, 1),
        "lines_per_s": round(len(bodies) / wall, 3),
    }


def _submit(server: LiveServer, bodies: list[dict[str, Any]]) -> str:
    content = "".join(
        json.dumps({"custom_id": f"line-{n}", "method": "POST", "url": "/v1/chat/completions", "body": b}) + "\n"
        for n, b in enumerate(bodies)
    ).encode()
    auth = {"authorization": f"Bearer {server.key}"}
    with httpx.Client(base_url=server.base, headers=auth, timeout=120) as http:
        upload = http.post("/v1/files", data={"purpose": "batch"}, files={"file": ("bench.jsonl", io.BytesIO(content))})
        if upload.status_code != 200:
            raise BenchFailure(f"POST /v1/files answered {upload.status_code}: {upload.text[:300]}")
        made = http.post(
            "/v1/batches",
            json={"input_file_id": upload.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"},
        )
        if made.status_code != 200:
            raise BenchFailure(f"POST /v1/batches answered {made.status_code}: {made.text[:300]}")
        return str(made.json()["id"])


def _batch(server: LiveServer, batch_id: str) -> dict[str, Any]:
    got = httpx.get(f"{server.base}/v1/batches/{batch_id}", headers={"authorization": f"Bearer {server.key}"})
    if got.status_code != 200:
        raise BenchFailure(f"GET /v1/batches/{batch_id} answered {got.status_code}: {got.text[:300]}")
    return dict(got.json())


def _until(server: LiveServer, batch_id: str, done: Any, timeout_s: float, progress: Progress) -> dict[str, Any]:
    deadline, shown = time.monotonic() + timeout_s, time.monotonic()
    while not done(batch := _batch(server, batch_id)):
        if batch["status"] in ("failed", "expired", "cancelled"):
            raise BenchFailure(f"the batch ended {batch['status']}: {batch.get('errors')}")
        if time.monotonic() > deadline:
            raise BenchFailure(f"the batch is still {batch['status']} after {timeout_s:.0f} s")
        if time.monotonic() - shown > 15:
            counts = batch["request_counts"]
            progress(f"    batch {batch['status']}: {counts['completed'] + counts['failed']}/{counts['total']}")
            shown = time.monotonic()
        time.sleep(0.2)
    return batch


def _spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": round(statistics.median(ordered), 3), "min": ordered[0], "max": ordered[-1]}


def _round(
    server: LiveServer,
    keys: list[str],
    jobs: list[Job],
    interactive: FleetSizes,
    sizes: BatchSizes,
    n: int,
    progress: Progress,
) -> dict[str, Any]:
    """One round, side by side: the direct run, the interactive workload alone, then again beside a batch."""
    out: dict[str, Any] = {"round": n}
    progress(f"[round {n}/{sizes.rounds}] direct: {sizes.lines} lines as fast as the engine allows")
    out["direct"] = asyncio.run(_direct(server, _lines(sizes, 2 * n * MEDIA_OFFSET), sizes.direct_concurrency))
    progress(f"[round {n}/{sizes.rounds}] interactive alone: {len(jobs)} requests at {interactive.rate:g}/s")
    out["alone"] = _phase(server, keys, jobs, interactive, progress)
    progress(f"[round {n}/{sizes.rounds}] interactive with a {sizes.lines}-line batch draining")
    batch_id = _submit(server, _lines(sizes, (2 * n + 1) * MEDIA_OFFSET))
    _until(server, batch_id, lambda b: b["request_counts"]["completed"] >= 1, sizes.batch_timeout_s, progress)
    ended: dict[str, Any] = {}

    def batch_end() -> float:
        ended.update(_until(server, batch_id, lambda b: b["status"] == "completed", sizes.batch_timeout_s, progress))
        return float(ended["completed_at"])

    # Only the interactive requests sent while the batch was still draining count.
    out["with_batch"] = _phase(server, keys, jobs, interactive, progress, sent_before=batch_end)
    running_s = max(1, ended["completed_at"] - ended["in_progress_at"])
    counts = ended["request_counts"]
    out["batch"] = {
        "id": batch_id,
        "request_counts": counts,
        "running_s": running_s,
        "lines_per_s": round(counts["total"] / running_s, 3),
    }
    alone, beside = out["alone"], out["with_batch"]
    out["ratios"] = {
        "ttft_p99_with_batch_over_alone": round(beside["ttft_p99_ms"] / alone["ttft_p99_ms"], 3),
        "ttft_p50_with_batch_over_alone": round(beside["ttft_p50_ms"] / alone["ttft_p50_ms"], 3),
        "batch_over_direct_throughput": round(out["batch"]["lines_per_s"] / out["direct"]["lines_per_s"], 3),
    }
    progress(
        f"  round {n}: TTFT p99 {alone['ttft_p99_ms']} ms alone, {beside['ttft_p99_ms']} ms with the batch; batch "
        f"{out['batch']['lines_per_s']} lines/s, direct {out['direct']['lines_per_s']}"
    )
    return out


def run_batch_bench(
    out: Path,
    settings: Settings,
    smoke: bool = False,
    rate: float | None = None,
    lines: int | None = None,
    batch_concurrency: int | None = None,
    progress: Progress = print,
) -> dict[str, Any]:
    sizes = SMOKE if smoke else FULL
    sizes = replace(sizes, lines=lines or sizes.lines)
    report: dict[str, Any] = {**stamp(smoke), "model": MODEL, "max_tokens": sizes.max_tokens, "lines": sizes.lines}
    report["batch_concurrency"] = batch_concurrency or Settings.model_fields["batch_concurrency"].default
    env = {"TESSERA_BATCH_CONCURRENCY": str(report["batch_concurrency"])}
    started = time.perf_counter()
    with live_server(settings.demo_dir(), [{"name": MODEL}], progress, env=env) as server:
        report["server_startup_s"] = round(server.startup_s, 1)
        warm_sizes = _fleet_sizes(sizes, 1, 1.0, seed=1)
        keys = tenant_keys(server, warm_sizes.tenants)
        asyncio.run(warm_up(server, keys, warm_sizes))
        if rate is None and sizes.ladder:
            progress("[1/4] goodput: a ladder of open-loop rates")
            report["goodput"] = _goodput(server, keys, sizes, progress)
            best = report["goodput"]["goodput_per_s"] or sizes.ladder[0] / 2
            rate = best / 2
        rate = rate or (SMOKE_RATE if smoke else 1.0)
        report["interactive_rate_per_s"] = rate
        interactive = _fleet_sizes(sizes, sizes.interactive, rate, seed=2027)
        jobs = workload(interactive)
        report["rounds"] = []
        for n in range(1, sizes.rounds + 1):
            report["rounds"].append(_round(server, keys, jobs, interactive, sizes, n, progress))
            write_report(out, report)
    rounds = report["rounds"]
    report["ratios"] = {name: _spread([r["ratios"][name] for r in rounds]) for name in rounds[0]["ratios"]}
    ratios = {name: spread["median"] for name, spread in report["ratios"].items()}
    report["target"] = {
        "ttft_p99_ratio_max": TARGET_P99_RATIO,
        "throughput_ratio_min": TARGET_THROUGHPUT_RATIO,
        "met": ratios["ttft_p99_with_batch_over_alone"] <= TARGET_P99_RATIO
        and ratios["batch_over_direct_throughput"] >= TARGET_THROUGHPUT_RATIO,
    }
    report["bench_s"] = round(time.perf_counter() - started, 1)
    progress(
        f"  median of {len(rounds)} rounds: TTFT p99 with the batch {ratios['ttft_p99_with_batch_over_alone']}x "
        f"alone's, p50 {ratios['ttft_p50_with_batch_over_alone']}x; batch throughput "
        f"{ratios['batch_over_direct_throughput']}x the direct run's"
    )
    write_report(out, report)
    check_report(
        report,
        positive=[
            "ratios.ttft_p99_with_batch_over_alone.median",
            "ratios.batch_over_direct_throughput.median",
        ],
    )
    failed = [
        (r["round"], k, r[k]["errors"]) for r in rounds for k in ("direct", "alone", "with_batch") if r[k]["errors"]
    ]
    failed += [
        (r["round"], "batch", r["batch"]["request_counts"]["failed"])
        for r in rounds
        if r["batch"]["request_counts"]["failed"]
    ]
    if failed:
        raise BenchFailure(f"failed requests (round, phase, count): {failed}")
    progress(f"wrote {out}")
    return report
