"""Prices per model and billable dimension, and the cost and meter quantities of one usage record."""

from __future__ import annotations

import threading
import time

from sqlalchemy import Engine
from sqlmodel import Session, select

from db.models import BillingOutbox, InferenceRequest, ModelPrice

DIMENSIONS = ("text_input", "image", "audio", "cached_media", "output")
# Batch lines (`/v1/batches`) pay this share of each price, in percent, set per model beside its prices; their meter
# events go to Stripe under their own dimensions (`batch_<dimension>`), so Stripe can price them apart too.
BATCH_PERCENT = "batch_percent"
DEFAULT_BATCH_PERCENT = 50
BATCH_DIMENSIONS = tuple(f"batch_{d}" for d in DIMENSIONS)

# Defaults per 1M tokens, in millionths of the currency unit. Cached media are billed at a tenth of fresh
# media: the encoder did not run for them.
DEFAULT_PRICES = {"text_input": 150_000, "image": 300_000, "audio": 400_000, "cached_media": 30_000, "output": 600_000}


def billable(*, text: int, image: int, audio: int, cached_image: int, cached_audio: int, output: int) -> dict[str, int]:
    """Billable tokens per dimension; media served from the embedding cache are billed as cached media."""
    cached_image, cached_audio = min(cached_image, image), min(cached_audio, audio)
    return {
        "text_input": text,
        "image": image - cached_image,
        "audio": audio - cached_audio,
        "cached_media": cached_image + cached_audio,
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
    )


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
            default = DEFAULT_BATCH_PERCENT if dimension == BATCH_PERCENT else DEFAULT_PRICES[dimension]
            return self._prices.get((model, dimension), default)

    def set(self, model: str, dimension: str, micros_per_million: int) -> None:
        """Sets a price (or, for `batch_percent`, the share of the prices batch lines pay, 0 to 100)."""
        if dimension == BATCH_PERCENT:
            if not 0 <= micros_per_million <= 100:
                raise ValueError("batch_percent must lie in [0, 100]")
        elif dimension not in DIMENSIONS or micros_per_million < 0:
            raise ValueError(f"dimension must be one of {(*DIMENSIONS, BATCH_PERCENT)} and the price non-negative")
        with Session(self._db) as s:
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
