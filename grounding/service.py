"""Grounding scores for finished requests, off the request path: the grounding subscriber of completion records.

A completed request that carried audio is scored after its usage row is written (metering runs before this
subscriber on the completion bus): the answer's claims against a transcript of the audio (see
`grounding.scorer`). One worker thread does the scoring, so a burst of audio
requests never takes more than one core from the engines; when more than `max_pending` requests wait, new ones
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
            "tessera_grounding_skipped", "Audio requests left unscored because the scorer was busy.", registry=registry
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
        """Schedule a score for a completed request that carried audio; skipped when too many already wait."""
        if record.status != "completed" or not record.audio:
            return
        if self._pending >= self._max_pending:
            self.skipped.inc()
            return
        self._pending += 1
        self._tasks.spawn(self._score(record.request_id, record.answer, record.audio[0]))

    async def _score(self, request_id: str, answer: str, audio: np.ndarray) -> None:
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            score = await loop.run_in_executor(self._executor, self._scorer.score_request, answer, audio)
            self.seconds.observe(loop.time() - started)
            if score is not None and await asyncio.to_thread(set_grounding_score, self._db, request_id, score):
                self.scored.inc()
        except Exception:
            self.failed.inc()
            logger.exception("grounding score of request %s failed", request_id)
        finally:
            self._pending -= 1

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._scorer.close()
