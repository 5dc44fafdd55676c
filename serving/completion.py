"""The lease that owns one request from admission to its last delta: `Completion`.

A `Completion` holds the caller's quota reservation, the pool's KV-admission ticket and the engine stream.
It is an async iterator of engine deltas and an async context manager. However it ends (completed, cancelled,
client gone, engine dead, exception) it releases each of them exactly once, aborts the engine request when
it did not finish, and publishes one immutable `CompletionRecord`. No caller releases anything by hand.

Every release is synchronous or handed to a background task, so a cancelled request cannot skip one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from serving.admission import Ticket
from serving.background import BackgroundTasks
from serving.engines.base import EngineDelta, EngineRequest, TokenLogprob
from serving.errors import Unavailable
from serving.policy import CallerIdentity, QuotaHold
from serving.pools import ModelPool
from serving.record import CompletionBus, CompletionRecord, TokenUsage
from serving.tools import OutputDecoder, ToolPlan, make_decoder


@dataclass(frozen=True)
class Submission:
    """What the service decided before the engine saw the request."""

    request_id: str
    created: int  # unix seconds
    pool: ModelPool
    engine_request: EngineRequest
    route_reason: str
    modalities: frozenset[str]
    caller: CallerIdentity
    started: float  # monotonic, when the request arrived
    submitted: float  # monotonic, when it left for the engine
    limits: dict[str, str] = field(default_factory=dict)  # the caller's rate-limit counters
    cached_media_tokens: dict[str, int] = field(default_factory=dict)
    degraded: tuple[str, ...] = ()
    audio: tuple[Any, ...] = ()
    images: tuple[Any, ...] = ()  # ImageFindings per image, where the pool's tower has a label head
    tools: ToolPlan | None = None
    question: str = ""  # the last user turn's text
    # Each medium's bytes as fetched or decoded from the request, with the request's `param` of its part, in the
    # client's order: what a stored response keeps so that a later turn never fetches them again.
    media: tuple[tuple[str, bytes], ...] = ()
    messages: tuple[Any, ...] = ()  # the request's messages as the client sent them, for a grounding judge
    endpoint: str = "chat"
    ticket: Ticket | None = None  # the pool's KV-admission ticket, told when the first token comes
    span: Any = None  # the engine span (serving.tracing), ended with the lease


class Settlement:
    """Settles the caller's quota hold once, with what the request used: nothing when refused before the
    engine, which the lease's release stack guarantees by registering it as soon as the hold exists."""

    def __init__(self, hold: QuotaHold, tasks: BackgroundTasks) -> None:
        self.hold = hold
        self.used = TokenUsage()
        self._tasks = tasks

    def __call__(self) -> None:
        self._tasks.spawn(self.hold.settle(self.used))


@dataclass
class Choice:
    """What one of the request's `n` choices has produced so far."""

    index: int
    token_ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.pieces)


class Completion:
    def __init__(
        self,
        submission: Submission,
        releases: ExitStack,
        settlement: Settlement | None,
        bus: CompletionBus,
        tasks: BackgroundTasks,
    ) -> None:
        self.submission = submission
        self._releases = releases
        self._settlement = settlement
        self._bus = bus
        self._tasks = tasks
        self._stream: AsyncIterator[EngineDelta] = submission.pool.engine.generate(submission.engine_request)
        self.prompt_token_ids: list[int] = []
        self.choices = [Choice(i) for i in range(submission.engine_request.params.n)]
        self._cached_tokens = 0
        self._gaps: list[tuple[float, int]] = []
        self.first_token_at: float | None = None
        self._last_token_at: float | None = None
        self._status: str | None = None
        self._closed = False
        self._recorded: asyncio.Future[bool] | None = None

    # -- identity ------------------------------------------------------------------------------------------

    @property
    def request_id(self) -> str:
        return self.submission.request_id

    @property
    def model(self) -> str:
        return self.submission.pool.name

    @property
    def finished(self) -> bool:
        """Every choice reached its finish reason: nothing is left to abort."""
        return all(c.finish_reason is not None for c in self.choices)

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].finish_reason

    @property
    def token_ids(self) -> list[int]:
        return self.choices[0].token_ids

    def decoder(self) -> OutputDecoder:
        """A fresh decoder of one choice's text into content and tool calls, for the request's tools."""
        pool = self.submission.pool
        return make_decoder(self.submission.tools, pool.tool_parser, pool.tokenizer())

    # -- the stream ----------------------------------------------------------------------------------------

    def __aiter__(self) -> Completion:
        return self

    async def __anext__(self) -> EngineDelta:
        if self._closed:
            raise StopAsyncIteration
        try:
            delta = await anext(self._stream)
        except StopAsyncIteration:
            self._status = "completed"
            await self.aclose()
            raise
        except (asyncio.CancelledError, GeneratorExit):
            self._status = "cancelled"
            self._end()
            raise
        except BaseException:
            self._status = "failed"
            await self.aclose()
            raise
        self._observe(delta)
        return delta

    async def first_delta(self) -> EngineDelta | None:
        """The first delta, or None when the engine finished without one; on failure the lease is closed
        before the error propagates, so a response that never started holds nothing."""
        try:
            return await anext(self, None)
        except BaseException:
            await self.aclose()
            raise

    async def __aenter__(self) -> Completion:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._status is None and exc_type is not None:
            cancelled = issubclass(exc_type, (asyncio.CancelledError, GeneratorExit))
            self._status = "cancelled" if cancelled else "failed"
        await self.aclose()

    async def aclose(self) -> None:
        """End the lease; a completion closed before its engine finished counts as cancelled."""
        self._end()
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()

    def _end(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._status = self._status or "cancelled"
        if not self.finished:
            self._tasks.spawn(self.submission.pool.engine.abort(self.request_id))
        record = self.record()
        if self.submission.span is not None:
            usage = record.usage
            self.submission.span.set_attributes(
                {
                    "tessera.status": record.status,
                    "gen_ai.usage.input_tokens": usage.prompt,
                    "gen_ai.usage.output_tokens": usage.completion,
                    "tessera.cached_tokens": usage.cached,
                }
            )
            self.submission.span.end()
        if self._settlement is not None:
            self._settlement.used = record.usage
        try:
            self._releases.close()
        finally:
            self._recorded = self._bus.publish(record)

    async def recorded(self, timeout_s: float = 30.0) -> bool:
        """Wait until the request's usage is durably recorded (the journal closed its entry), at most
        `timeout_s`. False when the journal gave up or the wait timed out: the journal keeps the record and
        settles it later, but the usage is not on record now."""
        if self._recorded is None:
            return True
        try:
            return await asyncio.wait_for(asyncio.shield(self._recorded), timeout_s)
        except TimeoutError:
            return False

    async def require_recorded(self, timeout_s: float = 30.0) -> None:
        """`recorded`, raising `Unavailable` (`metering_unavailable`) when the usage is not on record: the API
        calls it before it tells the client the request is done, and answers with the error instead."""
        if not await self.recorded(timeout_s):
            raise Unavailable(
                "the answer was generated but its usage could not be recorded; retry shortly",
                code="metering_unavailable",
                retry_after_s=2.0,
            )

    def _observe(self, delta: EngineDelta) -> None:
        now = time.monotonic()
        if delta.prompt_token_ids:
            self.prompt_token_ids = delta.prompt_token_ids
        self._cached_tokens = max(self._cached_tokens, delta.num_cached_tokens)
        choice = self.choices[delta.index]
        if delta.token_ids:
            if self.first_token_at is None:
                self.first_token_at = now
                if self.submission.span is not None:
                    self.submission.span.add_event("first_token")
                if self.submission.ticket is not None:
                    self.submission.pool.admission.answering(self.submission.ticket)
            elif self._last_token_at is not None:
                self._gaps.append((now - self._last_token_at, len(delta.token_ids)))
            self._last_token_at = now
            choice.token_ids.extend(delta.token_ids)
        if delta.text:
            choice.pieces.append(delta.text)
        if delta.logprobs:
            choice.logprobs.extend(delta.logprobs)
        if delta.finish_reason is not None:
            choice.finish_reason = delta.finish_reason

    # -- accounting ----------------------------------------------------------------------------------------

    @property
    def text(self) -> str:
        return self.choices[0].text

    def usage(self) -> TokenUsage:
        media = self.submission.pool.count_media_tokens(self.prompt_token_ids)
        image, audio = media.get("image", 0), media.get("audio", 0)
        prompt = len(self.prompt_token_ids)
        cached = self.submission.cached_media_tokens
        return TokenUsage(
            prompt=prompt,
            completion=sum(len(c.token_ids) for c in self.choices),
            cached=self._cached_tokens,
            text=prompt - image - audio,
            image=image,
            audio=audio,
            cached_image=cached.get("image", 0),
            cached_audio=cached.get("audio", 0),
        )

    def record(self) -> CompletionRecord:
        s = self.submission
        now = time.monotonic()
        return CompletionRecord(
            request_id=s.request_id,
            model=s.pool.name,
            modalities=s.modalities,
            status=self._status or "cancelled",
            finish_reason=self.finish_reason,
            usage=self.usage(),
            caller=s.caller,
            answer=self.text,
            audio=s.audio,
            images=s.images,
            question=s.question,
            messages=s.messages,
            endpoint=s.endpoint,
            pre_engine_s=s.submitted - s.started,
            ttft_s=None if self.first_token_at is None else self.first_token_at - s.started,
            total_s=now - s.started,
            token_gaps=tuple(self._gaps),
        )
