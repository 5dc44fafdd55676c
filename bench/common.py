"""What every bench shares: synthetic media, streamed TTFT, /metrics scrapes, and writing and checking reports."""

from __future__ import annotations

import base64
import io
import json
import math
import re
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import httpx

Progress = Callable[[str], None]
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class BenchFailure(RuntimeError):
    """A bench could not measure what it promised (a refused request, a missing number): the run fails."""


# -- synthetic media ----------------------------------------------------------------------------------


def pil_image(seed: int, size: tuple[int, int] = (320, 240)) -> Any:
    import numpy as np
    from PIL import Image

    w, h = size
    return Image.fromarray((np.random.default_rng(seed).random((h, w, 3)) * 255).astype("uint8"), "RGB")


def png_data_url(seed: int, size: tuple[int, int] = (320, 240)) -> str:
    buf = io.BytesIO()
    pil_image(seed, size).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def wav_b64(seconds: float = 2.0, rate: int = 16_000, freq: float = 440.0) -> str:
    import numpy as np
    import soundfile as sf

    t = np.arange(int(seconds * rate)) / rate
    buf = io.BytesIO()
    sf.write(buf, (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate, format="WAV")
    return base64.b64encode(buf.getvalue()).decode()


def speech(text: str) -> Any:
    """float32 mono 16 kHz speech, spoken slowly by espeak-ng's US voice (Whisper tiny.en mishears it at full
    speed)."""
    import shutil
    import subprocess
    import tempfile

    import numpy as np
    import soundfile as sf
    from scipy.signal import resample_poly

    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise RuntimeError("espeak-ng is missing: scripts/setup_venv.sh installs it")
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "speech.wav"
        subprocess.run([espeak, "-v", "en-us", "-s", "130", "-g", "2", "-w", str(wav), text], check=True)  # noqa: S603
        samples, rate = sf.read(wav, dtype="float32")
    return resample_poly(samples, 16_000, rate).astype(np.float32)


def unique_text() -> str:
    """A first line no earlier request had, so nothing is served from the engine's prefix cache."""
    return f"Request {time.perf_counter_ns()}."


# -- requests and metrics -----------------------------------------------------------------------------


async def stream_chat(http: httpx.AsyncClient, base: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    """Streams one chat completion. Returns ttft_s, last_s (when the last text came), total_s and the final usage
    (None if the server sent none)."""
    started = time.perf_counter()
    payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
    first: float | None = None
    last = 0.0  # when the last content arrived
    usage: dict[str, Any] | None = None
    async with http.stream(
        "POST", base + "/v1/chat/completions", json=payload, headers={"authorization": f"Bearer {key}"}
    ) as resp:
        if resp.status_code != 200:
            body_text = (await resp.aread()).decode(errors="replace")[:500]
            raise BenchFailure(f"bench request to '{body.get('model')}' failed: {resp.status_code} {body_text}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            if "error" in chunk:
                raise BenchFailure(f"bench stream to '{body.get('model')}' failed: {chunk['error']}")
            choices = chunk.get("choices") or []
            if choices and (choices[0].get("delta") or {}).get("content"):
                last = time.perf_counter() - started
                first = last if first is None else first
            if chunk.get("usage"):
                usage = chunk["usage"]
    total = time.perf_counter() - started
    ttft = first if first is not None else total
    return {"ttft_s": ttft, "total_s": total, "usage": usage, "first": first, "last_s": last if last else ttft}


async def ttft(http: httpx.AsyncClient, base: str, key: str, body: dict[str, Any]) -> float:
    return float((await stream_chat(http, base, key, body))["ttft_s"])


def metric(base: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus sample over its label sets, or over those carrying all `labels` (e.g. model="small")."""
    total = 0.0
    for line in httpx.get(base + "/metrics", timeout=30).text.splitlines():
        if not line.startswith((name + "{", name + " ")):
            continue
        present = dict(_LABEL.findall(line.rsplit("}", 1)[0])) if line.startswith(name + "{") else {}
        if all(present.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def spread(values: Sequence[float], each: str) -> dict[str, Any]:
    """The median of repeated runs' figures with its spread (min, max), and every run's figure under `each`."""
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        each: [round(v, 3) for v in values],
    }


# -- reports ------------------------------------------------------------------------------------------


def stamp(smoke: bool) -> dict[str, Any]:
    return {"started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "smoke": smoke}


def write_report(out: Path, report: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


def lookup(report: dict[str, Any], dotted: str) -> Any:
    value: Any = report
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise BenchFailure(f"the report has no '{dotted}'")
        value = value[part]
    return value


def check_report(report: dict[str, Any], positive: Iterable[str] = (), non_negative: Iterable[str] = ()) -> None:
    """Fails the run unless each named number (dotted path) is finite and > 0, or >= 0: no silent nonsense."""
    bad = []
    for dotted, floor_ok in [(p, False) for p in positive] + [(p, True) for p in non_negative]:
        value = lookup(report, dotted)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            bad.append(f"{dotted}={value!r} is not a number")
        elif value < 0 or (value == 0 and not floor_ok):
            bad.append(f"{dotted}={value!r} should be {'>= 0' if floor_ok else '> 0'}")
    if bad:
        raise BenchFailure("implausible results: " + "; ".join(bad))
