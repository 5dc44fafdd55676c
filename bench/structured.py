"""`tessera bench structured`: what guided decoding costs per output token, measured side by side.

The same prompts run with and without `response_format: json_schema`, interleaved, on one server; the report
gives the median time per output token (TPOT, after the first) of each side and their ratio, per pool.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import BenchFailure, Progress, check_report, stamp, stream_chat, unique_text, write_report
from bench.server import LiveServer, live_server
from config.settings import Settings

SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 40},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 16}, "minItems": 3, "maxItems": 6},
        "score": {"type": "integer", "minimum": 0, "maximum": 100},
        "summary": {"type": "string", "maxLength": 160},
    },
    "required": ["title", "tags", "score", "summary"],
    "additionalProperties": False,
}


async def _tpot(http: httpx.AsyncClient, server: LiveServer, model: str, max_tokens: int, guided: bool) -> float | None:
    """Seconds per output token after the first, or None when the answer was too short to time."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": f"{unique_text()} Describe a book as JSON."}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    if guided:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "book", "schema": SCHEMA}}
    else:
        body["ignore_eos"] = True
    run = await stream_chat(http, server.base, server.key, body)
    tokens = int((run["usage"] or {}).get("completion_tokens", 0)) - 1
    if run["first"] is None or tokens < 4:
        return None
    return float(run["total_s"] - run["ttft_s"]) / tokens


async def _pool(
    http: httpx.AsyncClient, server: LiveServer, model: str, rounds: int, max_tokens: int
) -> dict[str, Any]:
    await _tpot(http, server, model, 8, guided=True)  # warm-up: compiles the grammar once
    plain: list[float] = []
    guided: list[float] = []
    for _ in range(rounds):
        for side, out in ((False, plain), (True, guided)):
            value = await _tpot(http, server, model, max_tokens, side)
            if value is not None:
                out.append(value)
    if not plain or not guided:
        raise BenchFailure(f"{model}: too few answers long enough to time ({len(plain)} plain, {len(guided)} guided)")
    p, g = statistics.median(plain), statistics.median(guided)
    return {
        "tpot_plain_ms": round(p * 1000, 2),
        "tpot_guided_ms": round(g * 1000, 2),
        "tpot_ratio": round(g / p, 3),
        "timed": {"plain": len(plain), "guided": len(guided)},
    }


def run_structured_bench(
    out: Path, settings: Settings, smoke: bool = False, progress: Progress = print
) -> dict[str, Any]:
    from demo.checkpoints import build_demo_checkpoints

    models = ["small"] if smoke else ["small", "large"]
    rounds, max_tokens = (2, 24) if smoke else (8, 96)
    build_demo_checkpoints(settings.demo_dir(), models, progress=progress)
    report: dict[str, Any] = {**stamp(smoke), "rounds": rounds, "max_tokens": max_tokens, "pools": {}}

    async def go(server: LiveServer) -> None:
        async with httpx.AsyncClient(timeout=600) as http:
            for model in models:
                result = await _pool(http, server, model, rounds, max_tokens)
                report["pools"][model] = result
                progress(
                    f"  {model:6s} TPOT plain {result['tpot_plain_ms']:.1f} ms, with json_schema "
                    f"{result['tpot_guided_ms']:.1f} ms (x{result['tpot_ratio']:.2f})"
                )

    progress(f"starting the live server (pools {', '.join(models)})")
    started = time.perf_counter()
    with live_server(settings.demo_dir(), [{"name": m} for m in models], progress) as server:
        asyncio.run(go(server))
    report["bench_s"] = round(time.perf_counter() - started, 1)
    check_report(report, positive=[f"pools.{m}.{k}" for m in models for k in ("tpot_plain_ms", "tpot_guided_ms")])
    write_report(out, report)
    progress(f"wrote {out}")
    return report
