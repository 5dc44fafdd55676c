"""Metering: the completion record becomes one usage row and its billing outbox rows, in one transaction."""

from __future__ import annotations

import asyncio

from sqlalchemy import Engine

from billing.prices import PriceBook
from db.models import MODALITY_AUDIO, MODALITY_IMAGE, MODALITY_TEXT, InferenceRequest
from db.usage import record_usage
from serving.record import CompletionRecord


def usage_row(record: CompletionRecord) -> InferenceRequest:
    mask = MODALITY_TEXT | (MODALITY_IMAGE if "image" in record.modalities else 0)
    mask |= MODALITY_AUDIO if "audio" in record.modalities else 0
    u = record.usage
    return InferenceRequest(
        request_id=record.request_id,
        model_variant=record.model,
        modality_mask=mask,
        text_tokens=u.text,
        vision_tokens=u.image,
        audio_tokens=u.audio,
        cached_tokens=u.cached,
        output_tokens=u.completion,
        status=record.status,
        ttft_ms=None if record.ttft_s is None else int(record.ttft_s * 1000),
        total_latency_ms=int(record.total_s * 1000),
        tenant_id=record.caller.tenant_id,
        api_key_id=record.caller.key_id,
        cached_image_tokens=u.cached_image,
        cached_audio_tokens=u.cached_audio,
    )


class UsageRecorder:
    """The metering subscriber: writes each record's usage row, priced, on a worker thread."""

    def __init__(self, db: Engine, prices: PriceBook) -> None:
        self._db = db
        self._prices = prices

    async def __call__(self, record: CompletionRecord) -> None:
        await asyncio.to_thread(self._write, usage_row(record))

    def _write(self, row: InferenceRequest) -> None:
        row.cost_micros = self._prices.cost_micros(row)
        record_usage(self._db, row, self._prices.outbox_rows(row))
