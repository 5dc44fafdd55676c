"""`tessera bench latency`: server start-up, then TTFT and decode rate per demo checkpoint, text, image, audio; and
the embedding and transcription pools through Tessera against the same engines called directly (bench.tasks)."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    BenchFailure,
    Progress,
    check_report,
    png_data_url,
    stamp,
    stream_chat,
    unique_text,
    wav_b64,
    write_report,
)
from bench.server import LiveServer, live_server
from bench.tasks import TASK_ENV, TASK_POOLS, DirectEngines, measure_tasks
from config.settings import Settings

MODELS = ("small", "large")


def _requests() -> dict[str, list[dict[str, Any]]]:
    return {
        "text": [{"type": "text", "text": "Tell me about the sea."}],
        "image": [
            {"type": "text", "text": "Describe this image."},
            {"type": "image_url", "image_url": {"url": png_data_url(7)}},
        ],
        "audio": [
            {"type": "text", "text": "What do you hear?"},
            {"type": "input_audio", "input_audio": {"data": wav_b64(2.0), "format": "wav"}},
        ],
    }


async def measure(
    http: httpx.AsyncClient, server: LiveServer, model: str, parts: list[dict[str, Any]], max_tokens: int
) -> tuple[float, float]:
    """(TTFT in s, decode tokens/s after the first) of one streamed request with a fresh first line."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": [{"type": "text", "text": unique_text()}, *parts]}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    run = await stream_chat(http, server.base, server.key, body)
    if run["first"] is None or run["usage"] is None:
        raise BenchFailure(f"{model}: the stream had no content or no usage")
    decode_s = run["total_s"] - run["ttft_s"]
    tokens = int(run["usage"]["completion_tokens"]) - 1
    if tokens < 1 or decode_s <= 0:
        raise BenchFailure(f"{model}: {tokens + 1} completion tokens; need at least 2 to time decoding")
    return run["ttft_s"], tokens / decode_s


def run_latency_bench(
    out: Path,
    settings: Settings,
    smoke: bool = False,
    repeats: int | None = None,
    max_tokens: int | None = None,
    progress: Progress = print,
) -> dict[str, Any]:
    """Starts its own server (the embedded default's pools), streams each chat request, compares the embedding and
    transcription pools with the same engines called directly, and writes medians per model and modality to
    `out`."""
    from demo.checkpoints import build_demo_checkpoints

    repeats = repeats or (1 if smoke else 3)
    max_tokens = max_tokens or (4 if smoke else 32)
    build_demo_checkpoints(settings.demo_dir(), list(MODELS), progress=progress)
    requests = _requests()
    report: dict[str, Any] = {**stamp(smoke), "max_tokens": max_tokens, "repeats": repeats}

    async def go(server: LiveServer) -> dict[str, dict[str, dict[str, float]]]:
        results: dict[str, dict[str, dict[str, float]]] = {}
        async with httpx.AsyncClient(timeout=300) as http:
            for model in MODELS:
                for kind, parts in requests.items():
                    await measure(http, server, model, parts, 4)  # warm-up
                    runs = [await measure(http, server, model, parts, max_tokens) for _ in range(repeats)]
                    ttft = statistics.median(r[0] for r in runs)
                    rate = statistics.median(r[1] for r in runs)
                    results.setdefault(model, {})[kind] = {"ttft_s": round(ttft, 4), "decode_tok_per_s": round(rate, 2)}
                    progress(f"  {model:6s} {kind:6s} TTFT {ttft * 1000:7.1f} ms   decode {rate:6.1f} tok/s")
        return results

    progress("starting the live server (pools small, large, minilm, whisper)")
    started = time.perf_counter()
    pools = [{"name": m} for m in MODELS] + TASK_POOLS
    with live_server(settings.demo_dir(), pools, progress, env=TASK_ENV) as server:
        report["server_startup_s"] = round(server.startup_s, 1)
        report["requests"] = asyncio.run(go(server))
        progress("starting the same embedding and transcription engines in this process, to call them directly")
        direct = DirectEngines(settings.demo_dir())
        try:
            report.update(asyncio.run(measure_tasks(server, direct, smoke=smoke, progress=progress)))
        finally:
            direct.shutdown()
        t, e = report["transcription"], report["embeddings"]
        progress(
            f"  transcription RTF {t['tessera_rtf']['median']:.1f} through Tessera, {t['engine_rtf']['median']:.1f} "
            f"direct (ratio {t['rtf_ratio']:.2f}; Tessera's share of the wall time "
            f"{t['tessera_overhead_of_wall']['median']:.1%})"
        )
        progress(
            f"  embeddings {e['tessera_inputs_per_s']['median']:.0f} inputs/s through Tessera, "
            f"{e['engine_inputs_per_s']['median']:.0f} direct (ratio {e['throughput_ratio']:.2f})"
        )
    report["bench_s"] = round(time.perf_counter() - started, 1)
    check_report(
        report,
        positive=[
            "server_startup_s",
            *(f"requests.{m}.{k}.{f}" for m in MODELS for k in requests for f in ("ttft_s", "decode_tok_per_s")),
            "transcription.tessera_rtf.median",
            "transcription.engine_rtf.median",
            "embeddings.tessera_inputs_per_s.median",
            "embeddings.engine_inputs_per_s.median",
        ],
    )
    write_report(out, report)
    progress(f"wrote {out}")
    return report
