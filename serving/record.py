"""The completion record: one immutable account of a request that reached an engine, and its publication.

The lease publishes exactly one record per such request, whatever its end (completed, cancelled, failed).
Subscribers (metrics, metering, grounding) receive it in the order they were registered. A subscriber that
returns an awaitable is awaited before the next one runs, in the background, so metering's usage row is
written before grounding scores it; a failing subscriber is logged and never stops the others.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

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


Subscriber = Callable[[CompletionRecord], Awaitable[None] | None]


class CompletionBus:
    def __init__(self, tasks: BackgroundTasks, subscribers: Sequence[Subscriber] = ()) -> None:
        self._tasks = tasks
        self._subscribers = list(subscribers)

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def publish(self, record: CompletionRecord) -> None:
        """Runs synchronous subscribers now; from the first one that returns an awaitable on, the rest run in
        a background task that survives the request's cancellation."""
        for i, subscriber in enumerate(self._subscribers):
            pending = self._call(subscriber, record)
            if pending is not None:
                self._tasks.spawn(self._continue(record, pending, self._subscribers[i + 1 :]))
                return

    @staticmethod
    def _call(subscriber: Subscriber, record: CompletionRecord) -> Awaitable[None] | None:
        try:
            result = subscriber(record)
        except Exception:
            logger.exception("completion subscriber %r failed on %s", subscriber, record.request_id)
            return None
        return result if inspect.isawaitable(result) else None

    async def _continue(self, record: CompletionRecord, pending: Awaitable[None], rest: Sequence[Subscriber]) -> None:
        for subscriber in rest:
            try:
                await pending
            except Exception:
                logger.exception("completion subscriber failed on %s", record.request_id)
            pending = self._call(subscriber, record) or _done()
        try:
            await pending
        except Exception:
            logger.exception("completion subscriber failed on %s", record.request_id)


async def _done() -> None:
    return None
