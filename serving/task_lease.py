"""The lease of embedding and transcription requests: the chat lease's guarantees for pools that do not chat.

`TaskService.lease(pool, caller, ...)` acquires, in order, the caller's model permission, its precheck, its quota
reservation of the worst case, a slot of the pool's concurrency admission and the usage journal's open entry. Each
is registered on one release stack; whatever way the block ends (done, refused, cancelled, client gone, engine
failed) each is given back once, the reservation is settled to what the lease says was used, and one completion
record is published to the same bus as chat's, so metering, receipts, billing and Prometheus see every kind alike.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field

from serving.background import BackgroundTasks
from serving.completion import Settlement
from serving.errors import EngineUnavailable, NotFound, Unavailable
from serving.metrics import ServerMetrics
from serving.policy import CallerPolicy
from serving.pools import PoolRegistry, TaskPool
from serving.record import CompletionBus, CompletionRecord, OpenedRequest, TokenUsage
from serving.tracing import trace_id_of

logger = logging.getLogger(__name__)

REQUEST_PREFIX = {"embeddings": "embd", "transcriptions": "trsc", "translations": "trsl"}


@dataclass
class TaskLease:
    """One embedding or transcription request while it runs: the endpoint fills in what it used."""

    request_id: str
    pool: TaskPool
    endpoint: str
    used: TokenUsage = field(default_factory=TokenUsage)
    answer: str = ""  # a transcript (kept on the record, for subscribers), or "" for embeddings
    first_output_at: float | None = None  # monotonic, a transcription's first text
    _recorded: asyncio.Future[bool] | None = None

    def started_output(self) -> None:
        if self.first_output_at is None:
            self.first_output_at = time.monotonic()

    async def require_recorded(self, timeout_s: float = 30.0) -> None:
        """Waits until the usage journal has the request's row; `metering_unavailable` when it cannot say so."""
        if self._recorded is None:
            return
        try:
            ok = await asyncio.wait_for(asyncio.shield(self._recorded), timeout_s)
        except TimeoutError:
            ok = False
        if not ok:
            raise Unavailable(
                "the result was computed but its usage could not be recorded; retry shortly",
                code="metering_unavailable",
                retry_after_s=2.0,
            )


class TaskService:
    def __init__(
        self, pools: PoolRegistry, bus: CompletionBus, tasks: BackgroundTasks, metrics: ServerMetrics | None = None
    ) -> None:
        self.pools = pools
        self._bus = bus
        self._tasks = tasks
        self._metrics = metrics

    def pool(self, model: str, kind: str) -> TaskPool:
        """The pool of `kind` that `model` names; a 400 naming `model` for a pool of another kind, else a 404."""
        self.pools.require_kind(model, kind)
        found = self.pools.task(model)
        if found is None:
            known = [t.name for t in self.pools.tasks if t.kind == kind]
            raise NotFound(
                f"the model '{model}' does not exist; {kind} models here: {', '.join(known) or 'none'}",
                code="model_not_found",
                param="model",
            )
        return found

    @asynccontextmanager
    async def lease(
        self,
        pool: TaskPool,
        caller: CallerPolicy,
        endpoint: str,
        worst: TokenUsage,
        *,
        admit: bool = True,
        fingerprint: str | None = None,
    ) -> AsyncIterator[TaskLease]:
        """Holds what the request needs while the block runs; `admit=False` skips the engine's admission (an
        answer from the results cache runs no engine)."""
        started = time.monotonic()
        identity = caller.identity
        request_id = identity.request_id or f"{REQUEST_PREFIX[endpoint]}-{uuid.uuid4().hex}"
        caller.check_model(pool.name)
        await caller.precheck()
        modalities = frozenset(pool.modalities) | {"text"}
        with ExitStack() as releases:
            settlement = Settlement(await caller.reserve(pool.name, worst), self._tasks)
            releases.callback(settlement)
            if admit:
                if not pool.engine.is_healthy():
                    raise EngineUnavailable(f"the engine of model '{pool.name}' is not running", retry_after_s=5.0)
                waited = time.monotonic()
                ticket = await pool.admission.acquire(1, identity.priority)
                releases.callback(pool.admission.release, ticket)
                if self._metrics is not None:
                    self._metrics.admission_wait.labels(pool.name, identity.priority).observe(time.monotonic() - waited)
            await self._bus.open(
                OpenedRequest(
                    request_id=request_id,
                    model=pool.name,
                    modalities=modalities,
                    caller=identity,
                    text_tokens=worst.text,
                    image_tokens=0,
                    audio_tokens=worst.audio,
                    fingerprint=fingerprint,
                    endpoint=endpoint,
                    audio_ms=worst.audio_ms,
                    trace_id=trace_id_of(),
                )
            )
            lease = TaskLease(request_id, pool, endpoint)
            status = "completed"
            try:
                yield lease
            except (asyncio.CancelledError, GeneratorExit):
                status = "cancelled"
                raise
            except BaseException:
                status = "failed"
                raise
            finally:
                now = time.monotonic()
                first = lease.first_output_at
                record = CompletionRecord(
                    request_id=request_id,
                    model=pool.name,
                    modalities=modalities,
                    status=status,
                    finish_reason="stop" if status == "completed" else None,
                    usage=lease.used,
                    caller=identity,
                    answer=lease.answer,
                    audio=(),
                    pre_engine_s=0.0,
                    ttft_s=None if first is None else first - started,
                    total_s=now - started,
                    token_gaps=(),
                    endpoint=endpoint,
                )
                settlement.used = lease.used
                releases.close()
                lease._recorded = self._bus.publish(record)
