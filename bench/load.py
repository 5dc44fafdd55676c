"""`tessera bench load`: how much one node takes. The goodput ladder of the small demo checkpoint served by bare
`vllm serve` and by Tessera (auth, quotas, metering and the default grounding on), one server at a time, on the
same open-loop Poisson schedules (same rates, same seeds), for the mixed workload (70% text, 20% image, 10%
image+audio) and for text only.

Each rung sends `rung_s` seconds of arrivals at its rate; its verdict is TTFT p99 within the SLO and no errors.
The goodput of a server is the highest rate of the ladder (climbed in order) whose rung passed; the climb stops
at the first rung that fails. One rung can flip between runs, so the ladders are repeated (`--repeats`), the
servers alternating (bare, Tessera, bare, Tessera...), each repeat on schedules of its own seed, the same for
both servers. The report gives per repeat, rung and class TTFT p50/p99, TPOT p50 and errors, each server's
goodput, the ratio of Tessera's to the bare engine's, and their medians over the repeats with the spread; and
(`--plot`) TTFT p99 against rate for both, every repeat.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.common import BenchFailure, Progress, check_report, spread, stamp, write_report
from bench.fleet_phase import latency_summary, open_loop, tenant_keys, warm_up
from bench.fleet_workload import FleetSizes, workload
from bench.replicas import Replica
from bench.server import free_port, live_server
from config.settings import Settings

SLO_P99_MS = 250.0
WORKLOADS = {"mixed": (0.7, 0.2, 0.1), "text": (1.0, 0.0, 0.0)}


@dataclass(frozen=True)
class Ladder:
    rates: tuple[float, ...] = (4, 8, 16, 24, 32, 48, 64)
    rung_s: float = 10.0
    max_tokens: int = 16
    seed: int = 2026
    repeats: int = 3


FULL = Ladder()
SMOKE = Ladder(rates=(2, 4), rung_s=3.0, max_tokens=4, repeats=1)


@dataclass(frozen=True)
class _Bare:
    """A bare `vllm serve` replica, addressed like a live server (it ignores the bearer key)."""

    base: str
    key: str = "EMPTY"


def _sizes(ladder: Ladder, rate: float, mix: tuple[float, float, float]) -> FleetSizes:
    return FleetSizes(
        requests=max(4, round(rate * ladder.rung_s)),
        rate=rate,
        max_tokens=ladder.max_tokens,
        tenants=2,
        prompts_per_tenant=2,
        prompt_words=60,
        mix=mix,
        seed=ladder.seed + int(rate * 10),
    )


def _climb(target: Any, keys: list[str], ladder: Ladder, mix: tuple[float, float, float], progress: Progress) -> dict:
    rungs = []
    goodput = 0.0
    asyncio.run(warm_up(target, keys, _sizes(ladder, ladder.rates[0], mix)))
    for rate in ladder.rates:
        sizes = _sizes(ladder, rate, mix)
        results, wall_s, late_s = asyncio.run(open_loop(target, keys, workload(sizes), sizes, progress))
        ok = [r for r in results if r.get("error") is None]
        errors = len(results) - len(ok)
        summary = latency_summary(ok) if ok else {}
        p99 = float(summary.get("overall", {}).get("ttft_p99_ms", float("inf")))
        passed = errors == 0 and p99 <= SLO_P99_MS
        rungs.append(
            {
                "rate": rate,
                "requests": len(results),
                "errors": errors,
                "wall_s": round(wall_s, 1),
                "client_late_s": round(late_s, 3),
                "passed": passed,
                "latency": summary,
            }
        )
        progress(f"    {rate:5.1f} req/s: TTFT p99 {p99:8.1f} ms, {errors} errors -> {'ok' if passed else 'over'}")
        if not passed:
            break
        goodput = rate
    return {"goodput_rps": goodput, "rungs": rungs}


@contextmanager
def _bare_engine(settings: Settings, progress: Progress) -> Iterator[_Bare]:
    import tempfile

    checkpoint = settings.demo_dir() / "small"
    with tempfile.TemporaryDirectory(prefix="tessera-load-") as logs:
        replica = Replica(checkpoint, "small", free_port(), Path(logs) / "vllm.log")
        progress("  starting bare vllm serve (small)")
        replica.start()
        try:
            replica.wait_ready()
            yield _Bare(replica.url)
        finally:
            replica.stop()


def _one_repeat(settings: Settings, ladder: Ladder, progress: Progress) -> dict[str, Any]:
    """Both servers' ladders on this repeat's schedules: bare `vllm serve`, then Tessera."""
    servers: dict[str, Any] = {}
    progress("  bare vllm serve")
    with _bare_engine(settings, progress) as bare:
        servers["vllm"] = {
            name: _climb(bare, ["EMPTY", "EMPTY"], ladder, mix, progress) for name, mix in WORKLOADS.items()
        }
    progress("  Tessera (embedded small pool; auth, quotas, metering, grounding on)")
    with live_server(settings.demo_dir(), [{"name": "small"}], progress) as server:
        keys = tenant_keys(server, 2)
        servers["tessera"] = {name: _climb(server, keys, ladder, mix, progress) for name, mix in WORKLOADS.items()}
    ratio = {
        name: round(servers["tessera"][name]["goodput_rps"] / max(servers["vllm"][name]["goodput_rps"], 1e-9), 3)
        for name in WORKLOADS
    }
    return {"seed": ladder.seed, "servers": servers, "goodput_ratio": ratio}


def summarise(repeats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each server's goodput and the ratio, per workload: the median over the repeats with the spread."""
    return {
        "goodput_rps": {
            server: {
                name: spread([r["servers"][server][name]["goodput_rps"] for r in repeats], "per_repeat")
                for name in WORKLOADS
            }
            for server in ("vllm", "tessera")
        },
        "goodput_ratio": {
            name: spread([r["goodput_ratio"][name] for r in repeats], "per_repeat") for name in WORKLOADS
        },
    }


def run_load_bench(
    out: Path,
    settings: Settings,
    *,
    smoke: bool = False,
    rates: Sequence[float] | None = None,
    repeats: int | None = None,
    plot: Path | None = None,
    progress: Progress = print,
) -> dict[str, Any]:
    from demo.checkpoints import build_demo_checkpoints

    ladder = SMOKE if smoke else FULL
    if rates:
        ladder = replace(ladder, rates=tuple(sorted(rates)))
    if repeats:
        ladder = replace(ladder, repeats=repeats)
    build_demo_checkpoints(settings.demo_dir(), ["small"], progress=progress)
    report: dict[str, Any] = {
        **stamp(smoke),
        "slo_ttft_p99_ms": SLO_P99_MS,
        "ladder": {
            "rates": list(ladder.rates),
            "rung_s": ladder.rung_s,
            "max_tokens": ladder.max_tokens,
            "repeats": ladder.repeats,
        },
        "workloads": {name: list(mix) for name, mix in WORKLOADS.items()},
        "repeats": [],
    }
    started = time.perf_counter()
    for n in range(ladder.repeats):
        progress(f"[{n + 1}/{ladder.repeats}] ladders on schedules of seed {ladder.seed + 1000 * n}")
        report["repeats"].append(_one_repeat(settings, replace(ladder, seed=ladder.seed + 1000 * n), progress))
        write_report(out, report)
    report.update(summarise(report["repeats"]))
    report["bench_s"] = round(time.perf_counter() - started, 1)
    for name in WORKLOADS:
        t, v = (report["goodput_rps"][s][name] for s in ("tessera", "vllm"))
        ratio = report["goodput_ratio"][name]
        progress(
            f"  {name}: goodput Tessera {t['median']:g} req/s ({t['min']:g}-{t['max']:g}), bare vLLM "
            f"{v['median']:g} ({v['min']:g}-{v['max']:g}); ratio x{ratio['median']:g} "
            f"({ratio['min']:g}-{ratio['max']:g})"
        )
    if not smoke:
        check_report(report, positive=[f"goodput_rps.{s}.{w}.median" for s in ("tessera", "vllm") for w in WORKLOADS])
    elif not all(
        r["requests"]
        for rep in report["repeats"]
        for s in rep["servers"].values()
        for w in s.values()
        for r in w["rungs"]
    ):
        raise BenchFailure("a rung sent no requests")
    if plot is not None:
        _plot(plot, report)
        report["plot"] = str(plot)
    write_report(out, report)
    progress(f"wrote {out}")
    return report


def _plot(out: Path, report: dict[str, Any]) -> None:
    """TTFT p99 against rate, per server and workload, with the SLO line (Pillow, as the other plots)."""
    from PIL import Image, ImageDraw

    series = {
        (f"{server} {name}", n): [(r["rate"], r["latency"].get("overall", {}).get("ttft_p99_ms")) for r in w["rungs"]]
        for n, repeat in enumerate(report["repeats"])
        for server, workloads in repeat["servers"].items()
        for name, w in workloads.items()
    }
    points = [(x, y) for s in series.values() for x, y in s if y is not None]
    if not points:
        return
    width, height, left, right, top, bottom = 760, 460, 60, 20, 40, 50
    x_max = max(x for x, _ in points) * 1.05
    y_max = max(SLO_P99_MS * 1.5, min(max(y for _, y in points), SLO_P99_MS * 8)) * 1.05
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)

    def xy(x: float, y: float) -> tuple[float, float]:
        y = min(y, y_max)
        return left + x / x_max * (width - left - right), height - bottom - y / y_max * (height - top - bottom)

    draw.text((left, 12), f"TTFT p99 against offered load (open loop), {len(report['repeats'])} repeats", fill="black")
    draw.text((width // 2 - 30, height - 22), "requests per second", fill="black")
    draw.rectangle([xy(0, y_max), xy(x_max, 0)], outline="black")
    draw.line([xy(0, SLO_P99_MS), xy(x_max, SLO_P99_MS)], fill="#999999", width=1)
    draw.text((xy(0, SLO_P99_MS)[0] + 4, xy(0, SLO_P99_MS)[1] - 14), f"SLO {SLO_P99_MS:.0f} ms", fill="#666666")
    for i in range(6):
        draw.text((6, xy(0, y_max * i / 5)[1] - 6), f"{y_max * i / 5:.0f}", fill="black")
    for rate in report["ladder"]["rates"]:
        draw.text((xy(rate, 0)[0] - 6, height - bottom + 6), f"{rate:g}", fill="black")
    colors = ("#1f77b4", "#aec7e8", "#d62728", "#ff9896")
    names = list(dict.fromkeys(name for name, _ in series))
    for (name, _), values in series.items():
        colour = colors[names.index(name) % 4]
        pts = [xy(x, y) for x, y in values if y is not None]
        if len(pts) > 1:
            draw.line(pts, fill=colour, width=2)
        for p in pts:
            draw.ellipse([p[0] - 3, p[1] - 3, p[0] + 3, p[1] + 3], fill=colour)
    for n, name in enumerate(names):
        draw.text((left + 10, top + 10 + 16 * n), name, fill=colors[n % 4])
    out.parent.mkdir(parents=True, exist_ok=True)
    img.save(out)
