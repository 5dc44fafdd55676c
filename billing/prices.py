"""Prices per model and billable dimension, and the cost and meter quantities of one usage record."""

from __future__ import annotations

import threading
import time

from sqlalchemy import Engine
from sqlmodel import Session, select

from db.models import BillingOutbox, InferenceRequest, ModelPrice

DIMENSIONS = ("text_input", "image", "audio", "cached_media", "output")

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
        with self._lock:
            if time.monotonic() - self._loaded > self._cache_s:
                with Session(self._db) as s:
                    self._prices = {(p.model, p.dimension): p.micros_per_million for p in s.exec(select(ModelPrice))}
                self._loaded = time.monotonic()
            return self._prices.get((model, dimension), DEFAULT_PRICES[dimension])

    def set(self, model: str, dimension: str, micros_per_million: int) -> None:
        if dimension not in DIMENSIONS or micros_per_million < 0:
            raise ValueError(f"dimension must be one of {DIMENSIONS} and the price non-negative")
        with Session(self._db) as s:
            s.merge(ModelPrice(model=model, dimension=dimension, micros_per_million=micros_per_million))
            s.commit()
        with self._lock:
            self._loaded = 0.0

    def all(self, models: list[str]) -> dict[str, dict[str, int]]:
        return {m: {d: self.price(m, d) for d in DIMENSIONS} for m in models}

    def cost_micros(self, row: InferenceRequest) -> int:
        return self.cost_of(row.model_variant, quantities(row))

    def cost_of(self, model: str, amounts: dict[str, int], *, round_up: bool = False) -> int:
        """Millionths of the currency unit for `amounts` (tokens per dimension) on `model`; rounded down as
        billed, or up for a reservation that must never be less than the bill."""
        return _micros(sum(n * self.price(model, d) for d, n in amounts.items()), round_up)

    def outbox_rows(self, row: InferenceRequest) -> list[BillingOutbox]:
        if row.tenant_id is None:
            return []
        return [
            BillingOutbox(
                identifier=f"{row.request_id}:{dim}",
                request_id=row.request_id,
                tenant_id=row.tenant_id,
                dimension=dim,
                quantity=n,
            )
            for dim, n in quantities(row).items()
            if n > 0
        ]
