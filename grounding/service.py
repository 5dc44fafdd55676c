"""Grounding scores for finished requests: the grounding subscriber of completion records, and the guardrail's
verdicts for responses that wait for one.

A completed request with evidence to check is scored after its usage row is written (metering runs before this
subscriber on the completion bus): its claims against a transcript and sound label of its audio, and against what
the pool's vision tower detected in its images, where that tower has a label head (see `grounding.scorer`). The
score, the unsupported claims, the verdict against the tenant's threshold and the question's kind are stored on
the usage row. One worker thread does the scoring, so a burst of media requests never takes more than one core
from the engines. Under the default policy (`score`) a score is a quality signal, not a bill: when more than
`max_pending` requests wait, new ones go unscored (counted in `tessera_grounding_skipped`). Under `flag` and
`block` (grounding.guardrail) the response waits for its verdict, so those are always scored, and their clip's
transcript is started while the answer is still being generated (`prepare`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import Counter, Histogram
from sqlalchemy import Engine

from db.usage import set_grounding_score
from grounding.audio_evidence import Heard, sound_label
from grounding.guardrail import Verdict, decide, scores, waits_for_verdict
from grounding.hearing import AudioWordReader
from grounding.judge import Judge, JudgedClaim
from grounding.models import checkpoint_hint
from grounding.questions import question_kind
from grounding.scorer import GroundingResult, GroundingScorer, combine, each_evidence
from serving.background import BackgroundTasks
from serving.completion import Completion
from serving.gate import Action, GateVerdict
from serving.policy import CallerIdentity
from serving.record import CompletionRecord

logger = logging.getLogger(__name__)
VERDICT_TTL_S = 120.0
VERDICT_WAIT_S = 20.0  # the default of `grounding_verdict_wait_s`


class GroundingService:
    def __init__(
        self,
        db: Engine,
        scorer: GroundingScorer,
        tasks: BackgroundTasks,
        *,
        registry: Any,
        max_pending: int = 16,
        verdict_wait_s: float = VERDICT_WAIT_S,
    ) -> None:
        self._db = db
        self.verdict_wait_s = verdict_wait_s
        self._tasks = tasks
        self._scorer = scorer
        self._max_pending = max_pending
        self._pending = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grounding")
        self.judge: Judge | None = None  # set once the inference service exists (tessera.state)
        self._verdicts: dict[str, asyncio.Future[Verdict | None]] = {}
        self._transcripts: dict[str, asyncio.Future[Heard]] = {}
        self.scored = Counter("tessera_grounding_scored", "Requests given a grounding score.", registry=registry)
        self.skipped = Counter(
            "tessera_grounding_skipped", "Requests left unscored because the scorer was busy.", registry=registry
        )
        self.failed = Counter("tessera_grounding_failed", "Grounding scores that failed.", registry=registry)
        self.verdicts = Counter(
            "tessera_grounding_verdicts",
            "Scored answers by model, modality mix and whether they reached their tenant's threshold.",
            ["model", "modalities", "result"],
            registry=registry,
        )
        self.seconds = Histogram(
            "tessera_grounding_seconds",
            "Time to transcribe and score one answer.",
            buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
            registry=registry,
        )
        self.judge_seconds = Histogram(
            "tessera_grounding_judge_seconds",
            "Time the judge took over one answer's claims (every question, asked at once).",
            buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
            registry=registry,
        )

    @classmethod
    def create(
        cls,
        db: Engine,
        tasks: BackgroundTasks,
        *,
        registry: Any,
        transcript_hint: str | None = None,
        checkpoints: Sequence[Path] = (),
        verdict_wait_s: float = VERDICT_WAIT_S,
    ) -> GroundingService | None:
        """The service, or None (with a warning) when the scorer's model files are not installed. The first of
        `checkpoints` (strongest first) whose audio tower was trained to speak words lends its reading of every
        clip as evidence (grounding.hearing); without a `transcript_hint`, the first that carries a hint file
        gives the transcriber its hint."""
        if transcript_hint is None:
            transcript_hint = checkpoint_hint(checkpoints)
        try:
            reader = next(filter(None, (AudioWordReader.find(c) for c in checkpoints)), None)
            if reader is not None:
                logger.info("grounding hears clips with the audio tower of %s too", reader.checkpoint)
            scorer = GroundingScorer(transcript_hint=transcript_hint, audio_reader=reader)
        except FileNotFoundError as exc:
            logger.warning("grounding scores are off: %s", exc)
            return None
        return cls(db, scorer, tasks, registry=registry, verdict_wait_s=verdict_wait_s)

    def __call__(self, record: CompletionRecord) -> None:
        """Score a completed request with evidence to check (audio, or images a tower detected shapes in), as
        its caller's guardrail policy says: never under `off`; under `score`, skipped when too many already
        wait; under `flag` and `block` always, since a response waits for the verdict (`verdict`)."""
        policy = record.caller.grounding_policy
        if not scores(policy):
            return
        waits = waits_for_verdict(policy)
        if record.status != "completed" or not (record.audio or record.images or self._judged(record)):
            self._transcripts.pop(record.request_id, None)
            if waits:
                self._resolve(record.request_id, None)
            return
        if self._pending >= self._max_pending and not waits:
            self.skipped.inc()
            return
        self._pending += 1
        self._tasks.spawn(self._score(record))

    def _judged(self, record: CompletionRecord) -> bool:
        """Whether the judge checks this record: its caller's evidence names the judge and it carried media."""
        evidence = record.caller.grounding_evidence
        media = bool(record.modalities - {"text"})
        return self.judge is not None and evidence in ("judge", "both") and media and record.endpoint == "chat"

    # -- the grounding gate (serving.gate) ----------------------------------------------------------------------

    def waits(self, caller: CallerIdentity, completion: Completion) -> bool:
        """Whether the answer waits for its verdict: the caller's policy is `flag` or `block` and the request
        carried media. When it does, the clip's transcript starts now, while the answer is generated."""
        if not waits_for_verdict(caller.grounding_policy) or not completion.submission.modalities - {"text"}:
            return False
        self.prepare(completion.request_id, completion.submission.audio)
        return True

    def action(self, caller: CallerIdentity, verdict: GateVerdict | None, *, streamed: bool, attempt: int) -> Action:
        assert verdict is None or isinstance(verdict, Verdict)
        return decide(caller.grounding_policy, verdict, streamed=streamed, attempt=attempt)

    def prepare(self, request_id: str, audio: tuple[np.ndarray, ...]) -> None:
        """Start transcribing a request's clip while its answer is generated, for a response that will wait for
        its verdict: the transcript is most of the scorer's time. Only the first clip is heard."""
        if audio and request_id not in self._transcripts:
            loop = asyncio.get_running_loop()
            clip = audio[0]
            self._transcripts[request_id] = loop.run_in_executor(self._executor, self._transcripts_of, clip)

    def _transcripts_of(self, clip: np.ndarray) -> Heard:
        return self._scorer.hypotheses(clip) if sound_label(clip) == "speech" else Heard()

    async def verdict(self, request_id: str) -> Verdict | None:
        """The request's verdict once it is scored; None without evidence, when scoring failed, or after
        `verdict_wait_s` (the score is still stored when it comes)."""
        timeout_s = self.verdict_wait_s
        future = self._future(request_id)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            logger.warning("grounding verdict of %s took over %.0f s; answering without it", request_id, timeout_s)
            return None
        finally:
            self._verdicts.pop(request_id, None)

    def _future(self, request_id: str) -> asyncio.Future[Verdict | None]:
        future = self._verdicts.get(request_id)
        if future is None:
            future = self._verdicts[request_id] = asyncio.get_running_loop().create_future()
            # Nobody may come for it (the client left): forget it after a while either way, but never before a
            # response could still be waiting for it.
            ttl = max(VERDICT_TTL_S, 2 * self.verdict_wait_s)
            asyncio.get_running_loop().call_later(ttl, self._verdicts.pop, request_id, None)
        return future

    def _resolve(self, request_id: str, verdict: Verdict | None) -> None:
        future = self._future(request_id)
        if not future.done():
            future.set_result(verdict)

    async def _score(self, record: CompletionRecord) -> None:
        verdict: Verdict | None = None
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            # the judge's questions and the label head's reading run side by side: under `flag`, the answer waits
            # for the slower of the two, not their sum
            judged, label_head = await asyncio.gather(self._judge_claims(record), self._label_head(record))
            result = combine(label_head, judged)
            self.seconds.observe(loop.time() - started)
            if result is not None:
                threshold = record.caller.grounding_threshold
                verdict = Verdict(
                    result.score,
                    threshold,
                    result.claims,
                    result.unsupported,
                    result.checked,
                    by_evidence=each_evidence(label_head, judged),
                )
                stored = await asyncio.to_thread(
                    set_grounding_score,
                    self._db,
                    record.request_id,
                    verdict.score,
                    result.unsupported,
                    passed=verdict.passed,
                    question_kind=question_kind(record.question),
                    checked=result.checked,
                )
                if stored:
                    self.scored.inc()
                    mix = "+".join(m for m in ("text", "image", "audio") if m in record.modalities)
                    self.verdicts.labels(record.model, mix, "passed" if verdict.passed else "failed").inc()
        except Exception:
            self.failed.inc()
            logger.exception("grounding score of request %s failed", record.request_id)
        finally:
            self._pending -= 1
            if waits_for_verdict(record.caller.grounding_policy):
                self._resolve(record.request_id, verdict)

    async def _judge_claims(self, record: CompletionRecord) -> list[JudgedClaim] | None:
        if not self._judged(record):
            return None
        assert self.judge is not None
        started = asyncio.get_running_loop().time()
        judged = await self.judge.check(record)
        self.judge_seconds.observe(asyncio.get_running_loop().time() - started)
        return judged

    async def _label_head(self, record: CompletionRecord) -> GroundingResult | None:
        """The label head's (and transcript's) result, unless the caller's evidence is the judge alone."""
        if record.caller.grounding_evidence == "judge" or not (record.audio or record.images):
            return None
        audio = record.audio[0] if record.audio else None
        early = self._transcripts.pop(record.request_id, None)
        transcript = await early if early is not None else None
        return await asyncio.get_running_loop().run_in_executor(
            self._executor,
            functools.partial(
                self._scorer.score_media,
                record.answer,
                audio,
                record.images,
                question=record.question,
                transcript=transcript,
            ),
        )

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._scorer.close()
