"""Measures start-up, TTFT and decode rate per demo checkpoint for text, image and audio requests.

Starts its own server on a free port (the embedded default's pools), streams each request with the
openai SDK, and writes medians to JSON:

    .venv/bin/python -m tests.bench.serving_latency --json artifacts/serving_latency.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from openai import OpenAI

from api.bench import KEY, live_server
from tests import media
from tests.conftest import MODELS_DIR

REQUESTS = {
    "text": [{"type": "text", "text": "Tell me about the sea."}],
    "image": [
        {"type": "text", "text": "Describe this image."},
        {"type": "image_url", "image_url": {"url": media.png_data_url(7)}},
    ],
    "audio": [
        {"type": "text", "text": "What do you hear?"},
        {"type": "input_audio", "input_audio": {"data": media.audio_b64(2.0), "format": "wav"}},
    ],
}


def measure(client: OpenAI, model: str, parts: list[dict], max_tokens: int) -> tuple[float, float]:
    # A fresh first line per request, so no repeat is served from the engine's prefix cache.
    parts = [{"type": "text", "text": f"Request {time.perf_counter_ns()}."}, *parts]
    started = time.perf_counter()
    first = None
    usage = None
    for chunk in client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": parts}],
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    ):
        if chunk.choices and chunk.choices[0].delta.content and first is None:
            first = time.perf_counter()
        if chunk.usage is not None:
            usage = chunk.usage
    end = time.perf_counter()
    assert first is not None
    assert usage is not None
    return first - started, (usage.completion_tokens - 1) / (end - first)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()

    lines: list[str] = []
    pools = [{"name": "small"}, {"name": "large"}]
    started = time.perf_counter()
    with live_server(MODELS_DIR, pools, lines.append) as base:
        startup_s = time.perf_counter() - started
        print(f"server ready in {startup_s:.1f}s", flush=True)
        client = OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0, timeout=300)
        results: dict[str, dict[str, dict[str, float]]] = {}
        for model in ("small", "large"):
            for kind, parts in REQUESTS.items():
                measure(client, model, parts, 4)  # warm-up
                runs = [measure(client, model, parts, args.max_tokens) for _ in range(args.repeats)]
                ttft = statistics.median(r[0] for r in runs)
                rate = statistics.median(r[1] for r in runs)
                results.setdefault(model, {})[kind] = {"ttft_s": round(ttft, 4), "decode_tok_per_s": round(rate, 2)}
                print(f"{model:6s} {kind:6s} TTFT {ttft * 1000:7.1f} ms   decode {rate:6.1f} tok/s", flush=True)
    report = {
        "server_startup_s": round(startup_s, 1),
        "requests": results,
        "max_tokens": args.max_tokens,
        "repeats": args.repeats,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
