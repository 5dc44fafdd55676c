"""Builds test media: images, WAV and MP3 clips, and deliberately broken variants."""

from __future__ import annotations

import base64
import io
import struct
import zlib

import numpy as np
import soundfile as sf
from PIL import Image

from bench.common import speech  # noqa: F401 (the tests' spoken clips, as the benches speak theirs)


def image(seed: int = 0, size: tuple[int, int] = (320, 240)) -> Image.Image:
    rng = np.random.default_rng(seed)
    w, h = size
    return Image.fromarray((rng.random((h, w, 3)) * 255).astype("uint8"), "RGB")


def png_bytes(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def data_url(raw: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(raw).decode()


def png_data_url(seed: int = 0, size: tuple[int, int] = (320, 240)) -> str:
    return data_url(png_bytes(image(seed, size)))


def tone(seconds: float, rate: int, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def audio_bytes(seconds: float = 2.0, rate: int = 16000, fmt: str = "WAV") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, tone(seconds, rate), rate, format=fmt)
    return buf.getvalue()


def audio_b64(seconds: float = 2.0, rate: int = 16000, fmt: str = "WAV") -> str:
    return base64.b64encode(audio_bytes(seconds, rate, fmt)).decode()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def bomb_png(width: int = 50_000, height: int = 50_000) -> bytes:
    """A tiny PNG whose header claims an enormous canvas."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 16)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")


def truncated_png() -> bytes:
    raw = png_bytes(image(1))
    return raw[: len(raw) // 2]


def wav_b64(samples: np.ndarray, rate: int = 16_000) -> str:
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format="WAV", subtype="PCM_16")
    return base64.b64encode(buf.getvalue()).decode()
