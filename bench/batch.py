"""`tessera bench batch`: what a batch draining in the engines' idle time costs interactive traffic, and how fast it
drains against the engine's own pace.

On one live server (the `small` pool, embedded engine), with the fleet bench's mixed workload (70% text, 20% image,
10% image and audio, tenants' long system prompts, `max_tokens` 32):

1. The interactive rate: half of the server's goodput, the highest rate of a ladder of open-loop Poisson rates at
   which TTFT p99 stays within 250 ms (or the rate given with `--rate`).
2. Direct: the batch's lines sent straight to `/v1/chat/completions`, as fast as the engine allows (many at once),
   with no other traffic: the engine's throughput in lines per second.
3. Alone: the interactive workload at that rate: TTFT p50/p99.
4. With a batch: the same schedule again while a batch of the same kind of lines (fresh media) drains; then the
   batch runs to its end, and its throughput is its lines over its running time.

The report gives the TTFT p99 with the batch over the p99 without, and the batch's throughput over the direct one,
against the targets (at most 1.15x, at least 0.7x).
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from bench.common import BenchFailure, Progress, check_report, stamp, stream_chat, write_report
from bench.fleet import latency_summary, open_loop, tenant_keys, warm_up
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
    direct_concurrency: int = 32
    batch_timeout_s: float = 1800.0


FULL = BatchSizes()
SMOKE = BatchSizes(lines=12, interactive=8, max_tokens=8, ladder=(), ladder_requests=0, batch_timeout_s=300.0)


def _fleet_sizes(sizes: BatchSizes, requests: int, rate: float, seed: int) -> FleetSizes:
    return FleetSizes(requests=requests, rate=rate, max_tokens=sizes.max_tokens, seed=seed)


def _phase(server: LiveServer, keys: list[str], jobs: list[Job], sizes: FleetSizes, progress: Progress) -> dict:
    results, wall, late = asyncio.run(open_loop(server, keys, jobs, sizes, progress))
    ok = [r for r in results if not r["error"]]
    summary = latency_summary(ok)["overall"] if ok else {}
    return {
        "requests": len(results),
        "errors": len(results) - len(ok),
        "error_samples": sorted({r["error"] for r in results if r["error"]})[:3],
        "wall_s": round(wall, 1),
        "worst_send_lateness_ms": round(late * 1000, 1),
        **summary,
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


def _batch_lines(sizes: BatchSizes) -> list[dict[str, Any]]:
    """The batch's requests: the mixed workload's kinds and prompts, `max_tokens` of them each."""
    fleet = _fleet_sizes(sizes, sizes.lines, 1.0, seed=4242)
    return [request_body(job, fleet) for job in workload(fleet)]


def _fresh_media(bodies: list[dict[str, Any]], sizes: BatchSizes) -> list[dict[str, Any]]:
    """The same lines with media of their own (shifted seeds), so neither run finds the other's in the cache."""
    fleet = _fleet_sizes(sizes, sizes.lines, 1.0, seed=4242)
    shifted = [
        replace(
            j,
            image=None if j.image is None else j.image + MEDIA_OFFSET,
            audio=None if j.audio is None else j.audio + MEDIA_OFFSET,
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


def run_batch_bench(
    out: Path,
    settings: Settings,
    smoke: bool = False,
    rate: float | None = None,
    lines: int | None = None,
    progress: Progress = print,
) -> dict[str, Any]:
    sizes = SMOKE if smoke else FULL
    sizes = replace(sizes, lines=lines or sizes.lines)
    report: dict[str, Any] = {**stamp(smoke), "model": MODEL, "max_tokens": sizes.max_tokens, "lines": sizes.lines}
    started = time.perf_counter()
    with live_server(settings.demo_dir(), [{"name": MODEL}], progress) as server:
        report["server_startup_s"] = round(server.startup_s, 1)
        warm_sizes = _fleet_sizes(sizes, 1, 1.0, seed=1)
        keys = tenant_keys(server, warm_sizes.tenants)
        asyncio.run(warm_up(server, keys, warm_sizes))
        if rate is None and sizes.ladder:
            progress("[1/4] goodput: a ladder of open-loop rates")
            report["goodput"] = _goodput(server, keys, sizes, progress)
            best = report["goodput"]["goodput_per_s"] or sizes.ladder[0] / 2
            rate = best / 2
        rate = rate or 1.0
        report["interactive_rate_per_s"] = rate
        batch_bodies = _fresh_media(_batch_lines(sizes), sizes)
        progress(f"[2/4] direct: {sizes.lines} lines as fast as the engine allows")
        report["direct"] = asyncio.run(_direct(server, _batch_lines(sizes), sizes.direct_concurrency))
        interactive = _fleet_sizes(sizes, sizes.interactive, rate, seed=2027)
        jobs = workload(interactive)
        progress(f"[3/4] interactive alone: {len(jobs)} requests at {rate:g}/s")
        report["alone"] = _phase(server, keys, jobs, interactive, progress)
        progress(f"[4/4] interactive with a {sizes.lines}-line batch draining")
        batch_id = _submit(server, batch_bodies)
        _until(server, batch_id, lambda b: b["request_counts"]["completed"] >= 1, sizes.batch_timeout_s, progress)
        report["with_batch"] = _phase(server, keys, jobs, interactive, progress)
        ended = _until(server, batch_id, lambda b: b["status"] == "completed", sizes.batch_timeout_s, progress)
        running_s = max(1, ended["completed_at"] - ended["in_progress_at"])
        counts = ended["request_counts"]
        report["batch"] = {
            "id": batch_id,
            "request_counts": counts,
            "running_s": running_s,
            "lines_per_s": round(counts["total"] / running_s, 3),
        }
    report["ratios"] = {
        "ttft_p99_with_batch_over_alone": round(
            report["with_batch"]["ttft_p99_ms"] / report["alone"]["ttft_p99_ms"], 3
        ),
        "ttft_p50_with_batch_over_alone": round(
            report["with_batch"]["ttft_p50_ms"] / report["alone"]["ttft_p50_ms"], 3
        ),
        "batch_over_direct_throughput": round(report["batch"]["lines_per_s"] / report["direct"]["lines_per_s"], 3),
    }
    ratios = report["ratios"]
    report["target"] = {
        "ttft_p99_ratio_max": TARGET_P99_RATIO,
        "throughput_ratio_min": TARGET_THROUGHPUT_RATIO,
        "met": ratios["ttft_p99_with_batch_over_alone"] <= TARGET_P99_RATIO
        and ratios["batch_over_direct_throughput"] >= TARGET_THROUGHPUT_RATIO,
    }
    report["bench_s"] = round(time.perf_counter() - started, 1)
    progress(
        f"  TTFT p99 {report['alone']['ttft_p99_ms']} ms alone, {report['with_batch']['ttft_p99_ms']} ms with the "
        f"batch ({ratios['ttft_p99_with_batch_over_alone']}x); batch {report['batch']['lines_per_s']} lines/s, "
        f"direct {report['direct']['lines_per_s']} ({ratios['batch_over_direct_throughput']}x)"
    )
    write_report(out, report)
    check_report(
        report,
        positive=[
            "alone.ttft_p99_ms",
            "with_batch.ttft_p99_ms",
            "batch.lines_per_s",
            "direct.lines_per_s",
            "ratios.ttft_p99_with_batch_over_alone",
            "ratios.batch_over_direct_throughput",
        ],
    )
    failed = {k: report[k]["errors"] for k in ("direct", "alone", "with_batch") if report[k]["errors"]}
    if failed or counts["failed"]:
        raise BenchFailure(f"failed requests: {failed}, batch lines failed: {counts['failed']}")
    progress(f"wrote {out}")
    return report
