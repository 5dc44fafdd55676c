"""The completion record: one immutable account of a request that reached an engine, and its publication.

The lease publishes exactly one record per such request, whatever its end (completed, cancelled, failed).
Subscribers (metrics, metering, grounding) receive it in the order they were registered. A subscriber that
returns an awaitable is awaited before the next one runs, in the background, so metering's usage row is
written before grounding scores it; a failing subscriber is logged and never stops the others.

Metering is a journal (`Journal`): it opens an entry before the engine sees the request and closes it with
the record, so a request cut short by a crash still leaves an entry to settle. `publish` returns a future
that resolves once the journal has tried to close the entry (True when it did), which the API awaits before it
tells the client the request is done.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from serving.background import BackgroundTasks
from serving.policy import CallerIdentity

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TokenUsage:
    """Prompt tokens by modality, counted from the engine's own placeholder expansion, and output tokens."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0  # prompt tokens served from the engine's prefix cache
    text: int = 0
    image: int = 0
    audio: int = 0
    cached_image: int = 0  # media tokens whose encoder output came from the embedding cache
    cached_audio: int = 0
    audio_ms: int = 0  # a transcription's audio, billed per second
    cached_audio_ms: int = 0  # of it, what the tenant's results cache answered

    @property
    def total(self) -> int:
        return self.prompt + self.completion


@dataclass(frozen=True)
class CompletionRecord:
    request_id: str
    model: str
    modalities: frozenset[str]
    status: str  # completed | cancelled | failed
    finish_reason: str | None
    usage: TokenUsage
    caller: CallerIdentity
    answer: str
    audio: tuple[Any, ...]  # the decoded clips (float32 mono 16 kHz), for grounding
    pre_engine_s: float
    ttft_s: float | None  # from receipt of the request
    total_s: float
    token_gaps: tuple[tuple[float, int], ...]  # (seconds since the previous delta, tokens in it), after the first
    # What the vision tower's label head saw in each image (serving.encoders.detection.ImageFindings), for
    # grounding; empty where the pool's tower has no label head.
    images: tuple[Any, ...] = ()
    question: str = ""  # the last user turn's text, for grounding
    endpoint: str = "chat"  # chat | embeddings | transcriptions | translations | grounding (a judge's question)
    messages: tuple[Any, ...] = ()  # the request's messages as the client sent them, for a grounding judge


Subscriber = Callable[[CompletionRecord], Awaitable[None] | None]


@dataclass(frozen=True)
class OpenedRequest:
    """A request about to reach an engine, with the prompt tokens known before it does (from the rendered
    template and the media headers): what a crash would leave to bill."""

    request_id: str
    model: str
    modalities: frozenset[str]
    caller: CallerIdentity
    text_tokens: int
    image_tokens: int
    audio_tokens: int
    # sha256 of the last user turn's text and its media's content hashes: the same ask sent again has the same one.
    fingerprint: str | None = None
    endpoint: str = "chat"  # chat | embeddings | transcriptions | translations | grounding
    audio_ms: int = 0  # a transcription's audio, billed per second (also if it is cut short)
    trace_id: str | None = None  # the request's trace (serving.tracing), when traces are on
    route_reason: str | None = None  # why routing chose the pool (serving.routing), for the receipt
    attempt_of: str | None = None  # a second attempt at an answer: the first attempt's request id


class Journal(Protocol):
    async def open(self, opened: OpenedRequest) -> None:
        """Durably note the request before the engine sees it; raising refuses the request."""
        ...

    async def close(self, record: CompletionRecord) -> None:
        """Durably settle the request's entry with its record (retrying as it sees fit); raising means the entry
        is not settled yet."""
        ...


class CompletionBus:
    def __init__(
        self,
        tasks: BackgroundTasks,
        subscribers: Sequence[Subscriber] = (),
        journal: Journal | None = None,
        after: Sequence[Subscriber] = (),
    ) -> None:
        """Each record goes to `subscribers`, then `journal.close`, then `after` (and whoever `subscribe`s)."""
        self._tasks = tasks
        self._subscribers = list(subscribers)
        self._journal = journal
        self._after = list(after)

    def subscribe(self, subscriber: Subscriber) -> None:
        self._after.append(subscriber)

    async def open(self, opened: OpenedRequest) -> None:
        if self._journal is not None:
            await self._journal.open(opened)

    def publish(self, record: CompletionRecord) -> asyncio.Future[bool] | None:
        """Runs synchronous subscribers now; from the first one that returns an awaitable on, the rest run in
        a background task that survives the request's cancellation. Returns a future that resolves once the
        journal's close has returned (True) or raised (False); None without a journal."""
        chain: list[Subscriber] = [*self._subscribers]
        journal_at = None
        if self._journal is not None:
            journal_at = len(chain)
            chain.append(self._journal.close)
        chain += self._after
        for i, subscriber in enumerate(chain):
            pending = self._call(subscriber, record)
            if pending is None:
                continue
            durable, durable_at = None, None
            if journal_at is not None and i <= journal_at:
                durable, durable_at = asyncio.get_running_loop().create_future(), journal_at - i
            self._tasks.spawn(self._continue(record, pending, chain[i + 1 :], durable, durable_at))
            return durable
        return None

    @staticmethod
    def _call(subscriber: Subscriber, record: CompletionRecord) -> Awaitable[None] | None:
        try:
            result = subscriber(record)
        except Exception:
            logger.exception("completion subscriber %r failed on %s", subscriber, record.request_id)
            return None
        return result if inspect.isawaitable(result) else None

    async def _continue(
        self,
        record: CompletionRecord,
        pending: Awaitable[None],
        rest: Sequence[Subscriber],
        durable: asyncio.Future[bool] | None = None,
        durable_at: int | None = None,
    ) -> None:
        """Awaits `pending`, then each of `rest` in turn; `durable` resolves once the subscriber at position
        `durable_at` (counting `pending` as 0) has finished: True if it returned, False if it raised (or never
        ran to its end)."""
        try:
            for position, subscriber in enumerate([*rest, None]):
                succeeded = True
                try:
                    await pending
                except Exception:
                    succeeded = False
                    logger.exception("completion subscriber failed on %s", record.request_id)
                if durable is not None and position == durable_at and not durable.done():
                    durable.set_result(succeeded)
                if subscriber is not None:
                    pending = self._call(subscriber, record) or _done()
        finally:
            if durable is not None and not durable.done():
                durable.set_result(False)


async def _done() -> None:
    return None
