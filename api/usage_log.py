"""Records one usage row per engine request, off the request path, and drains pending writes at shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from sqlalchemy import Engine

from api.protocol import Usage
from billing.prices import PriceBook
from db.models import MODALITY_AUDIO, MODALITY_IMAGE, MODALITY_TEXT, InferenceRequest
from db.usage import record_usage

logger = logging.getLogger(__name__)


class UsageLog:
    def __init__(self, db: Engine, prices: PriceBook) -> None:
        self._db = db
        self._prices = prices
        self._pending: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `coro` as its own task: it survives the cancellation of the request that started it."""
        task = asyncio.get_running_loop().create_task(coro)
        self._pending.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("background task failed", exc_info=task.exception())

    def record(
        self,
        request_id: str,
        model: str,
        modalities: set[str],
        usage: Usage,
        status: str,
        ttft_ms: int | None,
        total_ms: int,
        *,
        tenant_id: str | None = None,
        api_key_id: str | None = None,
    ) -> asyncio.Task[Any]:
        """Write the usage row in a worker thread; the returned task finishes when it is written."""
        mask = MODALITY_TEXT | (MODALITY_IMAGE if "image" in modalities else 0)
        mask |= MODALITY_AUDIO if "audio" in modalities else 0
        d = usage.prompt_tokens_details
        row = InferenceRequest(
            request_id=request_id,
            model_variant=model,
            modality_mask=mask,
            text_tokens=d.text_tokens,
            vision_tokens=d.image_tokens,
            audio_tokens=d.audio_tokens,
            cached_tokens=d.cached_tokens,
            output_tokens=usage.completion_tokens,
            status=status,
            ttft_ms=ttft_ms,
            total_latency_ms=total_ms,
            tenant_id=tenant_id,
            api_key_id=api_key_id,
            cached_image_tokens=d.cached_image_tokens,
            cached_audio_tokens=d.cached_audio_tokens,
        )
        return self.spawn(asyncio.to_thread(self._write, row))

    def _write(self, row: InferenceRequest) -> None:
        row.cost_micros = self._prices.cost_micros(row)
        record_usage(self._db, row, self._prices.outbox_rows(row))

    async def drain(self, timeout_s: float = 10.0) -> None:
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=timeout_s)
