"""Audio loading: decode WAV or MP3, check the samples, mix to mono and resample to the encoder's rate."""

from __future__ import annotations

import hashlib
import io
import re
from dataclasses import dataclass
from math import gcd

import numpy as np

from serving.errors import MediaError
from serving.media.images import decode_base64

SUPPORTED_FORMATS = ("wav", "mp3")
MIN_SECONDS = 0.1
MAX_SAMPLE_RATE = 192_000
# What libsndfile calls each declared format's container.
CONTAINERS = {"wav": {"WAV", "WAVEX", "RF64"}, "mp3": {"MP3", "MPEG"}, "flac": {"FLAC"}, "ogg": {"OGG"}}


@dataclass(frozen=True)
class LoadedAudio:
    samples: np.ndarray  # float32 mono at `sample_rate`
    sample_rate: int
    content_hash: str

    @property
    def seconds(self) -> float:
        return len(self.samples) / self.sample_rate


class AudioLoader:
    def __init__(self, *, target_rate: int, max_seconds: float) -> None:
        self._target_rate = target_rate
        self._max_seconds = max_seconds

    def load_base64(self, data: str, fmt: str, *, param: str) -> LoadedAudio:
        return self.load_bytes(self.decode_base64(data, fmt, param=param), fmt, param=f"{param}.data")

    def decode_base64(self, data: str, fmt: str, *, param: str) -> bytes:
        if fmt not in SUPPORTED_FORMATS:
            raise MediaError(
                f"audio format {fmt!r} is not supported; use one of {', '.join(SUPPORTED_FORMATS)}",
                code="unsupported_audio_format",
                param=f"{param}.format",
            )
        return decode_base64(data, param=f"{param}.data")

    def probe(self, raw: bytes, fmt: str, *, param: str) -> float:
        """Duration in seconds from the header alone."""
        import soundfile as sf

        try:
            info = sf.info(io.BytesIO(raw))
        except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
            reason = re.sub(r"Error opening <[^>]*>: ", "", str(exc))  # libsndfile names the in-memory file object
            raise MediaError(f"the {fmt} audio cannot be decoded: {reason}", code="invalid_audio", param=param) from exc
        if info.format not in CONTAINERS.get(fmt, set()):
            raise MediaError(
                f"the audio was declared {fmt} but is {info.format}",
                code="audio_format_mismatch",
                param=param.removesuffix(".data") + ".format",
            )
        if not 0 < info.samplerate <= MAX_SAMPLE_RATE:
            raise MediaError(
                f"the audio's sample rate {info.samplerate} Hz is outside 1-{MAX_SAMPLE_RATE} Hz",
                code="invalid_audio",
                param=param,
            )
        if info.duration > self._max_seconds + 0.01:
            raise MediaError(
                f"the audio lasts {info.duration:.1f}s, over the limit of {self._max_seconds:g}s",
                code="audio_too_long",
                param=param,
            )
        return float(info.duration)

    def load_bytes(self, raw: bytes, fmt: str, *, param: str) -> LoadedAudio:
        """Decode and validate; blocking, so callers run it on the media thread pool."""
        import soundfile as sf

        claimed = self.probe(raw, fmt, param=param)  # header checks first: never decode an over-long clip
        try:
            samples, rate = sf.read(io.BytesIO(raw), dtype="float32", always_2d=True)
        except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
            raise MediaError(f"the {fmt} audio cannot be decoded: {exc}", code="invalid_audio", param=param) from exc
        decoded = len(samples) / rate
        if abs(decoded - claimed) > max(0.25, 0.05 * claimed):  # MP3 encoders pad a little
            raise MediaError(
                f"the audio's header claims {claimed:.2f}s but it decodes to {decoded:.2f}s",
                code="audio_duration_mismatch",
                param=param,
            )
        mono = samples.mean(axis=1)
        if not np.isfinite(mono).all():
            raise MediaError("the audio contains NaN or infinite samples", code="invalid_audio", param=param)
        if len(mono) < MIN_SECONDS * rate:
            raise MediaError(f"the audio is shorter than {MIN_SECONDS}s", code="audio_too_short", param=param)
        resampled = self._resample(mono, int(rate))
        digest = hashlib.sha256(f"{self._target_rate}:".encode() + resampled.tobytes()).hexdigest()
        return LoadedAudio(resampled, self._target_rate, digest)

    def _resample(self, mono: np.ndarray, rate: int) -> np.ndarray:
        if rate == self._target_rate:
            return np.ascontiguousarray(mono, dtype=np.float32)
        from scipy.signal import resample_poly

        div = gcd(rate, self._target_rate)
        out = resample_poly(mono, self._target_rate // div, rate // div)
        return np.ascontiguousarray(out, dtype=np.float32)
