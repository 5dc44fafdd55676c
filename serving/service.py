"""The one entry point of serving: `InferenceService.start(request, caller) -> Completion`.

It walks a request through the pipeline in one direction and acquires, in order: the caller's model
permission, media headers, the pool, the rendered prompt, the caller's quota reservation, the pool's KV
ticket, the encoded media and the engine stream. Whatever it acquired is registered on one release stack;
if a step fails, the stack gives everything back, and on success the stack is handed to the `Completion`,
which gives it back when the request ends.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

from serving.admission import PRIORITIES
from serving.background import BackgroundTasks
from serving.completion import Completion, Settlement, Submission
from serving.encoding import MediaEncoder, engine_media
from serving.engine import EngineRequest, GenerationParams
from serving.ingest import MessageLike
from serving.metrics import ServerMetrics
from serving.pipeline import Pipeline, require_healthy
from serving.policy import CallerPolicy
from serving.record import CompletionBus


@dataclass(frozen=True)
class GenerationRequest:
    """A chat request as serving sees it: free of HTTP and of the wire protocol."""

    model: str
    messages: Sequence[MessageLike]
    params: GenerationParams
    priority: str = "interactive"
    allow_degraded: bool = False


class InferenceService:
    def __init__(
        self,
        pipeline: Pipeline,
        encoder: MediaEncoder,
        metrics: ServerMetrics,
        bus: CompletionBus,
        tasks: BackgroundTasks,
    ) -> None:
        self.pipeline = pipeline
        self._encoder = encoder
        self._metrics = metrics
        self._bus = bus
        self._tasks = tasks

    async def start(self, request: GenerationRequest, caller: CallerPolicy) -> Completion:
        """Admit the request and submit it to an engine; refusals raise before anything is held."""
        started = time.monotonic()
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        try:
            with ExitStack() as releases:
                submission, settlement = await self._submit(request, caller, request_id, started, releases)
                completion = Completion(submission, releases.pop_all(), settlement, self._bus, self._tasks)
        except BaseException as exc:
            self._metrics.refused.labels(getattr(exc, "code", type(exc).__name__)).inc()
            raise
        self._metrics.pre_engine.labels(submission.pool.name).observe(submission.submitted - started)
        return completion

    async def _submit(
        self, request: GenerationRequest, caller: CallerPolicy, request_id: str, started: float, releases: ExitStack
    ) -> tuple[Submission, Settlement]:
        pipeline = self.pipeline
        plan = pipeline.plan(request.messages)
        named = pipeline.named_pool(request.model, plan)
        if named is not None:
            caller.check_model(named[0].name)  # before any media is fetched
        probed = await pipeline.probe(plan)
        prompt = await pipeline.render(named[0] if named else pipeline.first_pool(), plan)
        if named is None:
            pool, reason = pipeline.auto_pool(plan, prompt, probed)
            caller.check_model(pool.name)
            if pool.prompt_format != prompt.prompt_format:
                prompt = await pipeline.render(pool, plan)
        else:
            pool, reason = named
        require_healthy(pool)
        needed = pipeline.estimate(prompt, probed, pool) + request.params.max_tokens

        settlement = Settlement(await caller.reserve(pool.name, needed), self._tasks)
        releases.callback(settlement)
        ticket = await pool.admission.acquire(needed, request.priority)
        releases.callback(pool.admission.release, ticket)

        encoded = await self._encoder.encode(
            pool, plan, probed, request_id=request_id, allow_degraded=request.allow_degraded
        )
        if encoded.degraded:
            prompt = await pipeline.render(pool, encoded.plan)
        engine_request = EngineRequest(
            request_id=request_id,
            prompt=prompt.text,
            params=request.params,
            cache_salt=pipeline.cache_salt(caller.cache_salt, encoded.content_hashes),
            priority=PRIORITIES.get(request.priority, 0),
            **engine_media(encoded),
        )
        submission = Submission(
            request_id=request_id,
            created=int(time.time()),
            pool=pool,
            engine_request=engine_request,
            route_reason=reason,
            modalities=frozenset(encoded.plan.modalities),
            caller=caller.identity,
            started=started,
            submitted=time.monotonic(),
            limits=dict(settlement.hold.limits),
            cached_media_tokens=dict(encoded.cached_tokens),
            degraded=tuple(encoded.degraded),
            audio=tuple(a.samples for a in encoded.audios),
        )
        return submission, settlement
