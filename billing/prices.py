"""Prices per model and billable dimension, and the cost and meter quantities of one usage record."""

from __future__ import annotations

import threading
import time

from sqlalchemy import Engine
from sqlmodel import Session, select

from db.audit import SYSTEM, write_audit
from db.models import BillingOutbox, InferenceRequest, ModelPrice

# Tokens, except `audio_seconds` and `cached_audio_seconds`: the seconds of audio a transcription pool transcribed,
# or served from the tenant's results cache.
DIMENSIONS = ("text_input", "image", "audio", "cached_media", "output", "audio_seconds", "cached_audio_seconds")
# Batch lines (`/v1/batches`) pay this share of each price, in percent, set per model beside its prices; their meter
# events go to Stripe under their own dimensions (`batch_<dimension>`), so Stripe can price them apart too.
BATCH_PERCENT = "batch_percent"
DEFAULT_BATCH_PERCENT = 50
BATCH_DIMENSIONS = tuple(f"batch_{d}" for d in DIMENSIONS)

# Defaults per 1M tokens (per 1M seconds for the `_seconds` dimensions), in millionths of the currency unit. Cached
# images are billed at a tenth of fresh ones: their vision tower did not run. A cached transcript is billed at a
# tenth of a fresh one: no engine ran at all.
DEFAULT_PRICES = {
    "text_input": 150_000,
    "image": 300_000,
    "audio": 400_000,
    "cached_media": 30_000,
    "output": 600_000,
    "audio_seconds": 100_000_000,  # 0.0001 a second, 0.006 a minute
    "cached_audio_seconds": 10_000_000,
}


def _seconds(ms: int) -> int:
    return -(-ms // 1000)


def billable(
    *,
    text: int,
    image: int,
    audio: int,
    cached_image: int,
    cached_audio: int,
    output: int,
    audio_ms: int = 0,
    cached_audio_ms: int = 0,
) -> dict[str, int]:
    """Billable quantities per dimension.

    - A chat request: tokens by modality. Images served from the embedding cache are billed as cached media. Audio is
      billed in full even when its features were cached: only the log-mel features were reused, and the engine's
      audio tower still ran on them (`cached_audio` is reported, not discounted).
    - A transcription (`audio_ms` set): seconds of audio, started seconds counted whole, at the fresh or (for a
      transcript from the tenant's results cache) the cached rate; its audio tokens count against token quotas
      only, and its text output is part of the per-second price.
    """
    if audio_ms > 0:
        cached_ms = min(cached_audio_ms, audio_ms)
        return {"audio_seconds": _seconds(audio_ms - cached_ms), "cached_audio_seconds": _seconds(cached_ms)}
    cached_image = min(cached_image, image)
    return {
        "text_input": text,
        "image": image - cached_image,
        "audio": audio,
        "cached_media": cached_image,
        "output": output,
    }


def quantities(row: InferenceRequest) -> dict[str, int]:
    """Billable tokens per dimension of a usage row."""
    return billable(
        text=row.text_tokens,
        image=row.vision_tokens,
        audio=row.audio_tokens,
        cached_image=row.cached_image_tokens,
        cached_audio=row.cached_audio_tokens,
        output=row.output_tokens,
        audio_ms=row.audio_ms,
        cached_audio_ms=row.cached_audio_ms,
    )


def _default(dimension: str) -> int:
    return DEFAULT_BATCH_PERCENT if dimension == BATCH_PERCENT else DEFAULT_PRICES[dimension]


def _micros(micros_times_million: int, round_up: bool) -> int:
    return -(-micros_times_million // 1_000_000) if round_up else micros_times_million // 1_000_000


class PriceBook:
    """Prices from the database, cached briefly; a model without a row uses the defaults."""

    def __init__(self, db: Engine, *, cache_s: float = 10.0) -> None:
        self._db = db
        self._cache_s = cache_s
        self._loaded = 0.0
        self._prices: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def price(self, model: str, dimension: str) -> int:
        """Price per 1M tokens of `dimension` on `model` (for `batch_percent`, the batch share in percent)."""
        with self._lock:
            if time.monotonic() - self._loaded > self._cache_s:
                with Session(self._db) as s:
                    self._prices = {(p.model, p.dimension): p.micros_per_million for p in s.exec(select(ModelPrice))}
                self._loaded = time.monotonic()
            return self._prices.get((model, dimension), _default(dimension))

    def set(self, model: str, dimension: str, micros_per_million: int, *, actor: str = SYSTEM) -> None:
        """Sets a price (or, for `batch_percent`, the share of the prices batch lines pay, 0 to 100); the change and
        its audit row commit together."""
        if dimension == BATCH_PERCENT:
            if not 0 <= micros_per_million <= 100:
                raise ValueError("batch_percent must lie in [0, 100]")
        elif dimension not in DIMENSIONS or micros_per_million < 0:
            raise ValueError(f"dimension must be one of {(*DIMENSIONS, BATCH_PERCENT)} and the price non-negative")
        with Session(self._db) as s:
            earlier = s.get(ModelPrice, (model, dimension))
            before = _default(dimension) if earlier is None else earlier.micros_per_million
            target, after = f"{model}/{dimension}", {"value": micros_per_million}
            write_audit(s, actor, "price.set", target, {"value": before, "default": earlier is None}, after)
            s.merge(ModelPrice(model=model, dimension=dimension, micros_per_million=micros_per_million))
            s.commit()
        with self._lock:
            self._loaded = 0.0

    def all(self, models: list[str]) -> dict[str, dict[str, int]]:
        return {m: {d: self.price(m, d) for d in (*DIMENSIONS, BATCH_PERCENT)} for m in models}

    def cost_micros(self, row: InferenceRequest) -> int:
        return self.cost_of(row.model_variant, quantities(row), batch=row.priority == "batch")

    def cost_of(self, model: str, amounts: dict[str, int], *, round_up: bool = False, batch: bool = False) -> int:
        """Millionths of the currency unit for `amounts` (tokens per dimension) on `model`, at the batch share of
        the prices for a batch line; rounded down as billed, or up for a reservation that must never be less than
        the bill."""
        total = sum(n * self.price(model, d) for d, n in amounts.items())
        if batch:
            percent = self.price(model, BATCH_PERCENT)
            return -(-total * percent // 100_000_000) if round_up else total * percent // 100_000_000
        return _micros(total, round_up)

    def outbox_rows(self, row: InferenceRequest) -> list[BillingOutbox]:
        if row.tenant_id is None:
            return []
        return [
            BillingOutbox(
                identifier=f"{row.request_id}:{dim}",  # one per request and dimension, batch or not
                request_id=row.request_id,
                tenant_id=row.tenant_id,
                dimension=f"batch_{dim}" if row.priority == "batch" else dim,
                quantity=n,
            )
            for dim, n in quantities(row).items()
            if n > 0
        ]
