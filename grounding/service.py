"""Grounding scores for finished requests, off the request path: the grounding subscriber of completion records.

A completed request with evidence to check is scored after its usage row is written (metering runs before this
subscriber on the completion bus): the answer's sentences against a transcript of its audio, and its claims
about images against what the pool's vision tower detected, where that tower has a label head (see
`grounding.scorer` and `grounding.image_evidence`). The score and the unsupported claims are stored on the
usage row. One worker thread does the scoring, so a burst of media requests never takes more than one core from
the engines; when more than `max_pending` requests wait, new ones
go unscored (counted in `tessera_grounding_skipped`), because a score is a quality signal, not a bill.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from prometheus_client import Counter, Histogram
from sqlalchemy import Engine

from db.usage import set_grounding_score
from grounding.scorer import GroundingScorer
from serving.background import BackgroundTasks
from serving.detection import ImageFindings
from serving.record import CompletionRecord

logger = logging.getLogger(__name__)


class GroundingService:
    def __init__(
        self, db: Engine, scorer: GroundingScorer, tasks: BackgroundTasks, *, registry: Any, max_pending: int = 16
    ) -> None:
        self._db = db
        self._tasks = tasks
        self._scorer = scorer
        self._max_pending = max_pending
        self._pending = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grounding")
        self.scored = Counter("tessera_grounding_scored", "Requests given a grounding score.", registry=registry)
        self.skipped = Counter(
            "tessera_grounding_skipped", "Requests left unscored because the scorer was busy.", registry=registry
        )
        self.failed = Counter("tessera_grounding_failed", "Grounding scores that failed.", registry=registry)
        self.seconds = Histogram(
            "tessera_grounding_seconds",
            "Time to transcribe and score one answer.",
            buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
            registry=registry,
        )

    @classmethod
    def create(cls, db: Engine, tasks: BackgroundTasks, *, registry: Any) -> GroundingService | None:
        """The service, or None (with a warning) when the scorer's model files are not installed."""
        try:
            scorer = GroundingScorer()
        except FileNotFoundError as exc:
            logger.warning("grounding scores are off: %s", exc)
            return None
        return cls(db, scorer, tasks, registry=registry)

    def __call__(self, record: CompletionRecord) -> None:
        """Schedule a score for a completed request with evidence to check (audio, or images a tower detected
        shapes in); skipped when too many already wait."""
        if record.status != "completed" or not (record.audio or record.images):
            return
        if self._pending >= self._max_pending:
            self.skipped.inc()
            return
        self._pending += 1
        audio = record.audio[0] if record.audio else None
        self._tasks.spawn(self._score(record.request_id, record.answer, audio, record.images))

    async def _score(
        self, request_id: str, answer: str, audio: np.ndarray | None, images: tuple[ImageFindings, ...]
    ) -> None:
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            result = await loop.run_in_executor(self._executor, self._scorer.score_media, answer, audio, images)
            self.seconds.observe(loop.time() - started)
            if result is not None and await asyncio.to_thread(
                set_grounding_score, self._db, request_id, result.score, result.unsupported
            ):
                self.scored.inc()
        except Exception:
            self.failed.inc()
            logger.exception("grounding score of request %s failed", request_id)
        finally:
            self._pending -= 1

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._scorer.close()
