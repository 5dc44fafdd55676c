"""Metering as a journal: every request that reaches an engine leaves exactly one usage row, even if the
gateway dies mid-request.

- `open`: before the engine sees the request, a `running` row is written with the prompt tokens known then
  (the rendered template and the media headers) and this gateway instance as its owner. If it cannot be
  written, the request is refused: nothing runs unmetered.
- `close`: when the request ends, the row gets its final counts, its price and its billing outbox rows, in
  one transaction that only applies to a row still `running`. It is retried with backoff (a locked or slow
  database); a retry after a commit that did land finds the row settled and adds nothing, so nothing is
  billed twice. The API awaits it before it sends `[DONE]` or the response body. When every try fails, the
  record is kept for the heartbeat loop and `close` raises, so the API ends the response with
  `metering_unavailable` instead.
- Each gateway instance keeps a heartbeat row. Rows whose owner's heartbeat stopped (a crash, kill -9) are
  settled as `interrupted` by any gateway, at start-up and then periodically, billed for the prompt tokens
  known when they were opened.
- A batch line's row is the batch's to settle (`settle_batch_line`): `close` keeps its record, and the batch
  runner commits the settlement with the line's result in one transaction, so a line is either answered and
  billed, or neither. Its request id is fixed by the line, so when a gateway dies mid-line, the line runs again
  under the same id and takes its row over; orphan settlement leaves such rows alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta

from sqlalchemy import Engine, delete, or_
from sqlmodel import Session, col, select

from billing.prices import PriceBook
from db.models import (
    MODALITY_AUDIO,
    MODALITY_IMAGE,
    MODALITY_TEXT,
    GatewayInstance,
    InferenceRequest,
    utcnow,
)
from serving.errors import Unavailable
from serving.record import CompletionRecord, OpenedRequest
from serving.tracing import step

logger = logging.getLogger(__name__)

RUNNING = "running"
INTERRUPTED = "interrupted"


def _mask(modalities: frozenset[str]) -> int:
    mask = MODALITY_TEXT | (MODALITY_IMAGE if "image" in modalities else 0)
    return mask | (MODALITY_AUDIO if "audio" in modalities else 0)


def usage_row(record: CompletionRecord) -> InferenceRequest:
    u = record.usage
    return InferenceRequest(
        request_id=record.request_id,
        model_variant=record.model,
        modality_mask=_mask(record.modalities),
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
        priority=record.caller.priority,
        endpoint=record.endpoint,
        audio_ms=u.audio_ms,
        cached_audio_ms=u.cached_audio_ms,
    )


class UsageJournal:
    def __init__(
        self,
        db: Engine,
        prices: PriceBook,
        *,
        heartbeat_s: float = 10.0,
        stale_s: float = 60.0,
        retry_delays_s: Sequence[float] = (0.1, 0.3, 1.0, 2.0, 4.0, 8.0),
    ) -> None:
        self._db = db
        self._prices = prices
        self._heartbeat_s = heartbeat_s
        self._stale = timedelta(seconds=stale_s)
        self._retry_delays = tuple(retry_delays_s)
        self.instance_id = str(uuid.uuid4())
        self._task: asyncio.Task[None] | None = None
        self._unsettled: dict[str, CompletionRecord] = {}  # closes that ran out of retries, tried again later
        self._batch_lines: dict[str, CompletionRecord] = {}  # closed batch lines, until their batch settles them
        self.interrupted_total = 0

    # -- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Register this instance, settle what dead instances left running, and keep the heartbeat going."""
        await asyncio.to_thread(self._register)
        settled = await asyncio.to_thread(self.settle_orphans)
        if settled:
            logger.warning("usage journal: settled %d requests left running by a stopped gateway", settled)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for record in list(self._unsettled.values()):
            await self._close_now(record)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_s)
            try:
                await asyncio.to_thread(self._beat)
                for record in list(self._unsettled.values()):
                    await self._close_now(record)
                await asyncio.to_thread(self.settle_orphans)
            except Exception:  # the database is away: try again at the next beat
                logger.warning("usage journal: heartbeat failed", exc_info=True)

    def _register(self) -> None:
        with Session(self._db) as s:
            s.add(GatewayInstance(id=self.instance_id, hostname=socket.gethostname()[:255], pid=os.getpid()))
            s.commit()

    def _beat(self) -> None:
        with Session(self._db) as s:
            row = s.get(GatewayInstance, self.instance_id)
            if row is None:
                row = GatewayInstance(id=self.instance_id, hostname=socket.gethostname()[:255], pid=os.getpid())
            row.heartbeat_at = utcnow()
            s.add(row)
            s.commit()

    # -- the journal interface -------------------------------------------------------------------------------

    async def open(self, opened: OpenedRequest) -> None:
        """Write the running row, trying briefly (a busy database); refuse the request with 503 if it cannot."""
        for delay in (0.05, 0.2, None):
            try:
                await asyncio.to_thread(self._open, opened)
                return
            except Exception as exc:
                if delay is None:
                    logger.error("usage journal: cannot open %s: %s", opened.request_id, exc)
                    raise Unavailable(
                        "usage cannot be recorded right now, so the request was not run; retry shortly",
                        code="metering_unavailable",
                        retry_after_s=2.0,
                    ) from exc
                await asyncio.sleep(delay)

    def _open(self, opened: OpenedRequest) -> None:
        row = InferenceRequest(
            request_id=opened.request_id,
            model_variant=opened.model,
            modality_mask=_mask(opened.modalities),
            text_tokens=opened.text_tokens,
            vision_tokens=opened.image_tokens,
            audio_tokens=opened.audio_tokens,
            status=RUNNING,
            tenant_id=opened.caller.tenant_id,
            api_key_id=opened.caller.key_id,
            owner=self.instance_id,
            prompt_fingerprint=opened.fingerprint,
            priority=opened.caller.priority,
            endpoint=opened.endpoint,
            audio_ms=opened.audio_ms,
            trace_id=opened.trace_id,
            route_reason=None if opened.route_reason is None else opened.route_reason[:96],
            attempt_of=opened.attempt_of,
        )
        with Session(self._db) as s:
            if opened.caller.batch_line:  # a batch line run again: its earlier run's row is taken over
                earlier = s.get(InferenceRequest, opened.request_id, with_for_update=True)
                if earlier is not None and earlier.status != RUNNING:
                    raise RuntimeError(f"{opened.request_id} was settled already")
                if earlier is not None:
                    s.delete(earlier)
                    s.flush()
            s.add(row)
            s.commit()

    async def close(self, record: CompletionRecord) -> None:
        """Settle the record's row, retrying; if every try fails, it stays queued for the heartbeat loop and
        this raises `Unavailable` (`metering_unavailable`): the request's usage is not on record yet. A batch
        line's record waits for `settle_batch_line`."""
        if record.caller.batch_line:
            self._batch_lines[record.request_id] = record
            return
        for delay in (*self._retry_delays, None):
            try:
                with step("tessera.usage.write", **{"tessera.request_id": record.request_id}):
                    await asyncio.to_thread(self._close, record)
                self._unsettled.pop(record.request_id, None)
                return
            except Exception as exc:
                if delay is None:
                    logger.error("usage journal: could not settle %s (%s); will retry", record.request_id, exc)
                    self._unsettled[record.request_id] = record
                    raise Unavailable(
                        "the request's usage could not be recorded; it will be settled later",
                        code="metering_unavailable",
                        retry_after_s=2.0,
                    ) from exc
                logger.warning("usage journal: settling %s failed (%s); retrying", record.request_id, exc)
                await asyncio.sleep(delay)

    async def _close_now(self, record: CompletionRecord) -> None:
        try:
            await asyncio.to_thread(self._close, record)
            self._unsettled.pop(record.request_id, None)
        except Exception:
            logger.warning("usage journal: %s still unsettled", record.request_id, exc_info=True)

    def _close(self, record: CompletionRecord) -> bool:
        """One try, in one transaction. False when the row was already settled (nothing is added again)."""
        with Session(self._db, expire_on_commit=False) as s:
            if not self._settle_in(s, record):
                return False
            s.commit()
        return True

    def settle_batch_line(self, request_id: str, write: Callable[[Session], bool]) -> bool:
        """Commits a batch line's result (`write`, which returns False when the line already has one) together
        with the usage of its request, if it reached an engine: both or neither. Returns whether it committed."""
        record = self._batch_lines.get(request_id)
        with Session(self._db, expire_on_commit=False) as s:
            if not write(s):
                s.rollback()
                self._batch_lines.pop(request_id, None)
                return False
            if record is not None:
                self._settle_in(s, record)
            s.commit()
        self._batch_lines.pop(request_id, None)
        return True

    def forget_batch_line(self, request_id: str) -> None:
        """Drops a batch line's record whose result could not be committed: the line runs again."""
        self._batch_lines.pop(request_id, None)

    def settle_abandoned(self, request_ids: Sequence[str]) -> int:
        """Settles as interrupted the rows a batch's unfinished lines left running (their gateway died, and the batch
        ended before they ran again), billed for the prompt tokens known when they were opened."""
        settled = 0
        with Session(self._db, expire_on_commit=False) as s:
            for request_id in request_ids:
                row = s.get(InferenceRequest, request_id, with_for_update=True)
                if row is None or row.status != RUNNING:
                    continue
                self._interrupt(s, row)
                settled += 1
            s.commit()
        return settled

    def _interrupt(self, s: Session, row: InferenceRequest) -> None:
        """Settles a row left running as interrupted, billed for the prompt tokens known when it was opened."""
        row.status = INTERRUPTED
        row.cost_micros = self._prices.cost_micros(row)
        s.add(row)
        s.add_all(self._prices.outbox_rows(row))

    def _settle_in(self, s: Session, record: CompletionRecord) -> bool:
        """Settles the record's row within `s`; False when it was already settled (nothing is added again)."""
        final = usage_row(record)
        final.cost_micros = self._prices.cost_micros(final)
        row = s.get(InferenceRequest, record.request_id, with_for_update=True)
        if row is not None and row.status != RUNNING:
            return False
        if row is None:  # opened before the journal existed, or its open was lost: the record is the truth
            s.add(final)
        else:
            for name in (
                "modality_mask",
                "text_tokens",
                "vision_tokens",
                "audio_tokens",
                "cached_tokens",
                "output_tokens",
                "status",
                "ttft_ms",
                "total_latency_ms",
                "cached_image_tokens",
                "cached_audio_tokens",
                "audio_ms",
                "cached_audio_ms",
                "cost_micros",
            ):
                setattr(row, name, getattr(final, name))
            s.add(row)
        s.add_all(self._prices.outbox_rows(final))
        return True

    # -- orphans ---------------------------------------------------------------------------------------------

    def settle_orphans(self) -> int:
        """Settle as interrupted the rows left running by instances whose heartbeat stopped; returns how many.
        Safe to run on several gateways at once: each row is claimed under a row lock and settled once."""
        cutoff = utcnow() - self._stale
        settled = 0
        with Session(self._db, expire_on_commit=False) as s:
            alive = select(GatewayInstance.id).where(col(GatewayInstance.heartbeat_at) >= cutoff)
            query = (
                select(InferenceRequest)
                .where(InferenceRequest.status == RUNNING)
                .where(InferenceRequest.priority != "batch")  # its batch settles it (settle_batch_line)
                .where(or_(col(InferenceRequest.owner).is_(None), col(InferenceRequest.owner).not_in(alive)))
                .where(col(InferenceRequest.created_at) < cutoff)
                .with_for_update(skip_locked=True)
                .limit(500)
            )
            for row in s.exec(query).all():
                self._interrupt(s, row)
                settled += 1
            s.execute(delete(GatewayInstance).where(col(GatewayInstance.heartbeat_at) < utcnow() - timedelta(days=1)))
            s.commit()
        self.interrupted_total += settled
        return settled
