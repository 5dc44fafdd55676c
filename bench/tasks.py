"""`tessera bench latency`'s embedding and transcription part: the same engine through Tessera and called directly,
side by side.

The direct side starts a second engine of each demo pool in the bench's own process, from the same engine spec
Tessera starts its pools with, and drives it with what Tessera would send (the same token ids; the same decoder
prompt and 30 s windows). Rounds alternate the two sides, one request at a time for transcription (its real-time
factor: audio seconds per wall second) and at a fixed concurrency for embeddings (inputs per second); the report
gives each median with its min and max, and the ratio of Tessera to the engine. The results cache is off on the
bench's server, so every Tessera round transcribes.
"""

from __future__ import annotations

import asyncio
import io
import statistics
import time
from typing import Any

import httpx
import numpy as np

from bench.common import BenchFailure, Progress, speech
from bench.server import LiveServer

TASK_POOLS: list[dict[str, Any]] = [
    {"name": "minilm", "kind": "embedding", "kv_cache_gib": 0.0625},
    {"name": "whisper", "kind": "transcription", "kv_cache_gib": 0.25},
]
TASK_ENV = {"TESSERA_TRANSCRIPTION_CACHE_DAYS": "0"}
SPEECH = "I would like a cup of coffee. Please call me back tomorrow morning. It is raining outside."
EMBED_BATCH = 16  # inputs per request
EMBED_CONCURRENCY = 4  # requests at once


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4), "max": round(max(values), 4)}


def _speech_clip(seconds_at_least: float) -> tuple[np.ndarray, bytes]:
    import soundfile as sf

    one = speech(SPEECH)
    pause = np.zeros(8_000, dtype=np.float32)
    parts: list[np.ndarray] = []
    while sum(len(p) for p in parts) < seconds_at_least * 16_000:
        parts += [one, pause]
    samples = np.concatenate(parts).astype(np.float32)
    buf = io.BytesIO()
    sf.write(buf, samples, 16_000, format="WAV", subtype="PCM_16")
    return samples, buf.getvalue()


class DirectEngines:
    """A second engine of each demo task pool in this process: what Tessera's pools would be without Tessera."""

    def __init__(self, models_dir: Any) -> None:
        from transformers import AutoTokenizer

        from config.settings import PoolSettings
        from demo.task_checkpoints import build_task_checkpoint
        from serving.engines.inprocess import VllmEngine
        from serving.engines.specs import engine_spec
        from serving.pools import TaskPool

        self.pools: dict[str, TaskPool] = {}
        for raw in TASK_POOLS:
            settings = PoolSettings.model_validate(raw)
            path = str(build_task_checkpoint(models_dir, settings.name))
            engine = VllmEngine.start(f"{settings.name}-direct", engine_spec(settings, path, 0))
            tokenizer = AutoTokenizer.from_pretrained(path)
            self.pools[settings.name] = TaskPool(
                settings.name, settings.kind, engine, tokenizer, english_only=settings.kind == "transcription"
            )

    def shutdown(self) -> None:
        import gc

        for pool in self.pools.values():
            pool.engine.shutdown()
        self.pools.clear()
        gc.collect()  # vLLM's engine shuts down again when collected: here, not at interpreter exit

    async def transcribe(self, samples: np.ndarray) -> str:
        from serving.engines.base import SpeechRequest
        from serving.speech import (
            SpeechOptions,
            SpeechTokens,
            WindowResult,
            decode_window,
            decoder_prompt,
            window_params,
            windows,
        )

        pool = self.pools["whisper"]
        tokens, options = SpeechTokens(pool.tokenizer), SpeechOptions()
        prompt = decoder_prompt(pool, tokens, options)
        cut = windows(samples)
        results = [WindowResult(offset, len(chunk) / 16_000) for offset, chunk in cut]

        async def run(i: int, chunk: np.ndarray) -> None:
            request = SpeechRequest(
                f"direct-{time.perf_counter_ns()}-{i}", chunk, prompt, window_params(options, tokens, len(prompt), None)
            )
            async for _ in decode_window(pool, request, results[i]):
                pass

        await asyncio.gather(*(run(i, chunk) for i, (_, chunk) in enumerate(cut)))
        return " ".join(r.text.strip() for r in results)

    async def embed(self, batches: list[list[str]]) -> int:
        pool = self.pools["minilm"]
        semaphore = asyncio.Semaphore(EMBED_CONCURRENCY)

        async def one(batch: list[str]) -> int:
            async with semaphore:
                ids = [pool.tokenizer(text)["input_ids"] for text in batch]
                stamp = time.perf_counter_ns()
                await asyncio.gather(*(pool.engine.embed(f"direct-{stamp}-{i}", x) for i, x in enumerate(ids)))
                return len(batch)

        return sum(await asyncio.gather(*(one(b) for b in batches)))


async def _tessera_transcribe(http: httpx.AsyncClient, server: LiveServer, wav: bytes) -> str:
    resp = await http.post(
        server.base + "/v1/audio/transcriptions",
        headers={"authorization": f"Bearer {server.key}"},
        files={"file": ("clip.wav", wav, "audio/wav")},
        data={"model": "whisper", "response_format": "json"},
    )
    if resp.status_code != 200:
        raise BenchFailure(f"transcription: {resp.status_code} {resp.text[:300]}")
    return str(resp.json()["text"])


async def _tessera_embed(http: httpx.AsyncClient, server: LiveServer, batches: list[list[str]]) -> int:
    semaphore = asyncio.Semaphore(EMBED_CONCURRENCY)

    async def one(batch: list[str]) -> int:
        async with semaphore:
            resp = await http.post(
                server.base + "/v1/embeddings",
                headers={"authorization": f"Bearer {server.key}"},
                json={"model": "minilm", "input": batch, "encoding_format": "base64"},
            )
            if resp.status_code != 200:
                raise BenchFailure(f"embeddings: {resp.status_code} {resp.text[:300]}")
            return len(resp.json()["data"])

    return sum(await asyncio.gather(*(one(b) for b in batches)))


async def measure_tasks(
    server: LiveServer, direct: DirectEngines, *, smoke: bool, progress: Progress
) -> dict[str, Any]:
    """Transcription real-time factor and embedding throughput, Tessera and the direct engine alternating."""
    rounds = 1 if smoke else 5
    samples, wav = _speech_clip(8.0 if smoke else 20.0)
    audio_s = len(samples) / 16_000
    texts = [f"Sentence {i}: the fleet serves embeddings beside chat." for i in range(64 if smoke else 512)]
    batches = [texts[i : i + EMBED_BATCH] for i in range(0, len(texts), EMBED_BATCH)]
    walls: dict[str, list[float]] = {"tessera": [], "engine": []}
    rates: dict[str, list[float]] = {"tessera": [], "engine": []}
    heard: dict[str, str] = {}
    async with httpx.AsyncClient(timeout=600) as http:
        await _tessera_transcribe(http, server, wav)  # warm-up, both sides
        await direct.transcribe(samples)
        await _tessera_embed(http, server, batches[:2])
        await direct.embed(batches[:2])
        for r in range(rounds):
            for side in ("tessera", "engine") if r % 2 == 0 else ("engine", "tessera"):
                started = time.perf_counter()
                text = await (
                    _tessera_transcribe(http, server, wav) if side == "tessera" else direct.transcribe(samples)
                )
                walls[side].append(time.perf_counter() - started)
                heard[side] = text
                started = time.perf_counter()
                count = await (_tessera_embed(http, server, batches) if side == "tessera" else direct.embed(batches))
                rates[side].append(count / (time.perf_counter() - started))
            progress(
                f"  round {r + 1}/{rounds}: transcription {walls['tessera'][-1]:.2f} s vs {walls['engine'][-1]:.2f} s,"
                " "
                f"embeddings {rates['tessera'][-1]:.0f} vs {rates['engine'][-1]:.0f} inputs/s"
            )
    if heard["tessera"].split() != heard["engine"].split():
        raise BenchFailure(f"the two sides heard different words: {heard}")
    rtf = {side: [audio_s / w for w in walls[side]] for side in walls}
    overheads = [1 - e / t for e, t in zip(walls["engine"], walls["tessera"], strict=True)]
    return {
        "transcription": {
            "audio_s": round(audio_s, 2),
            "rounds": rounds,
            "tessera_rtf": _spread(rtf["tessera"]),
            "engine_rtf": _spread(rtf["engine"]),
            "rtf_ratio": round(statistics.median(rtf["tessera"]) / statistics.median(rtf["engine"]), 3),
            "tessera_overhead_of_wall": _spread(overheads),
            "text": heard["tessera"],
        },
        "embeddings": {
            "inputs": len(texts),
            "inputs_per_request": EMBED_BATCH,
            "concurrency": EMBED_CONCURRENCY,
            "rounds": rounds,
            "tessera_inputs_per_s": _spread(rates["tessera"]),
            "engine_inputs_per_s": _spread(rates["engine"]),
            "throughput_ratio": round(statistics.median(rates["tessera"]) / statistics.median(rates["engine"]), 3),
        },
    }
