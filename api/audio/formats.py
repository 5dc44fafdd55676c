"""A transcript in each of OpenAI's `response_format`s: json, text, srt, vtt and verbose_json."""

from __future__ import annotations

import math
import zlib
from typing import Any

from serving.speech import Segment

RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
TIMED_FORMATS = ("srt", "vtt", "verbose_json")  # decoded with Whisper's timestamps
MEDIA_TYPES = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}
LANGUAGE_NAMES = {"en": "english"}


def usage(seconds: float) -> dict[str, Any]:
    """Whisper-class models are billed by the second of audio: OpenAI's `duration` usage."""
    return {"type": "duration", "seconds": math.ceil(seconds)}


def _clock(seconds: float, decimal: str) -> str:
    ms = round(seconds * 1000)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal}{ms:03d}"


def srt(segments: list[Segment]) -> str:
    blocks = [
        f"{i}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{s.text.strip()}\n" for i, s in enumerate(segments, 1)
    ]
    return "\n".join(blocks)


def vtt(segments: list[Segment]) -> str:
    blocks = [f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text.strip()}\n" for s in segments]
    return "WEBVTT\n\n" + "\n".join(blocks)


def _compression_ratio(text: str) -> float:
    raw = text.encode()
    return round(len(raw) / len(zlib.compress(raw)), 3) if raw else 0.0


def verbose(
    task: str, language: str | None, duration: float, text: str, segments: list[Segment], temperature: float
) -> dict[str, Any]:
    return {
        "task": task,
        "language": LANGUAGE_NAMES.get(language or "en", language or "english"),
        "duration": round(duration, 3),
        "text": text,
        "segments": [
            {
                "id": s.id,
                "seek": int(s.start * 100),  # in Whisper's 10 ms frames
                "start": s.start,
                "end": s.end,
                "text": s.text,
                "tokens": s.tokens,
                "temperature": temperature,
                "avg_logprob": s.avg_logprob,
                "compression_ratio": _compression_ratio(s.text),
                "no_speech_prob": s.no_speech_prob,  # None where the checkpoint has no no-speech token
            }
            for s in segments
        ],
        "usage": usage(duration),
    }


def render(
    response_format: str,
    *,
    task: str,
    language: str | None,
    duration: float,
    text: str,
    segments: list[Segment],
    temperature: float,
) -> tuple[str | dict[str, Any], str]:
    """The body and its media type."""
    body: str | dict[str, Any]
    if response_format == "text":
        body = text
    elif response_format == "srt":
        body = srt(segments)
    elif response_format == "vtt":
        body = vtt(segments)
    elif response_format == "verbose_json":
        body = verbose(task, language, duration, text, segments, temperature)
    else:
        body = {"text": text, "usage": usage(duration)}
    return body, MEDIA_TYPES[response_format]
