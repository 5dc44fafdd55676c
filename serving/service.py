"""The one entry point of serving: `InferenceService.start(request, caller) -> Completion`.

It walks a request through the pipeline in one direction and acquires, in order: the caller's model
permission, media headers, the pool, the rendered prompt, the caller's quota reservation, the pool's KV
ticket, the encoded media and the engine stream. Whatever it acquired is registered on one release stack;
if a step fails, the stack gives everything back, and on success the stack is handed to the `Completion`,
which gives it back when the request ends.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

from serving.admission import PRIORITIES
from serving.background import BackgroundTasks
from serving.completion import Completion, Settlement, Submission
from serving.encoders.detection import ImageFindings
from serving.encoders.encoding import EncodedMedia, MediaEncoder, affinity_key, detects, engine_media, image_findings
from serving.engines.base import EngineRequest, GenerationParams
from serving.errors import InvalidRequest
from serving.gate import Body, GatedAnswer, GroundingGate, VerdictSource, gated_answer, stream_verdict
from serving.ingest import MessageLike, MessagePlan, ProbedMedia
from serving.metrics import ServerMetrics, modality_mix
from serving.pipeline import Pipeline, RenderedPrompt, require_healthy
from serving.policy import CallerPolicy
from serving.pools import ModelPool
from serving.record import CompletionBus, OpenedRequest, TokenUsage
from serving.tools import AUTO, ToolPlan
from serving.tracing import headers_for, step, trace_id_of, tracer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenerationRequest:
    """A chat request as serving sees it: free of HTTP and of the wire protocol."""

    model: str
    messages: Sequence[MessageLike]
    params: GenerationParams
    priority: str = "interactive"
    allow_degraded: bool = False
    tools: ToolPlan | None = None
    # The client sees nothing until the answer is whole (not streamed): a replica that fails mid-answer can then be
    # replaced by another, since no byte of the failed attempt ever reached the client.
    buffered: bool = False
    endpoint: str = "chat"  # what usage and receipts name it: chat, or grounding for a judge's question
    # A second attempt at an answer (a cascade's escalation, a guardrail's regeneration): the first attempt's request
    # id, and the route reason its receipt gives instead of routing's own.
    attempt_of: str | None = None
    route_reason: str | None = None

    def rendered_tools(self) -> list[dict[str, Any]] | None:
        return self.tools.rendered_tools() if self.tools else None


class InferenceService:
    def __init__(
        self,
        pipeline: Pipeline,
        encoder: MediaEncoder,
        metrics: ServerMetrics,
        bus: CompletionBus,
        tasks: BackgroundTasks,
        gate: GroundingGate | None = None,
    ) -> None:
        self.pipeline = pipeline
        self._encoder = encoder
        self._metrics = metrics
        self._bus = bus
        self._tasks = tasks
        self.gate = gate  # checks answers against their media where a caller's guardrail waits for a verdict

    async def _findings(
        self, pool: ModelPool, encoded: EncodedMedia, caller: CallerPolicy
    ) -> tuple[ImageFindings, ...]:
        """Grounding evidence for the request's images: the pool's own tower's detections, else (unless the
        caller's answers go unscored) another pool's that detects. A failure there costs the score, not the
        request."""
        found = image_findings(pool, encoded)
        if found or not encoded.images or caller.identity.grounding_policy == "off":
            return found
        detector = next((p for p in self.pipeline.pools.pools if detects(p)), None)
        if detector is None:
            return ()
        try:
            return await self._encoder.detect(detector, encoded)
        except Exception:
            logger.exception("detecting the images of a request to '%s' with '%s' failed", pool.name, detector.name)
            return ()

    def strongest_model(self, modalities: frozenset[str]) -> str:
        """The strongest pool that takes every one of `modalities` (the one a second attempt goes to)."""
        able = [p for p in self.pipeline.pools.pools if modalities <= set(p.modalities)]
        if not able:
            raise InvalidRequest(f"no model accepts {', '.join(sorted(modalities))} input together", param="model")
        return max(able, key=lambda p: p.strength).name

    async def answer(
        self, request: GenerationRequest, caller: CallerPolicy, render: Callable[[Completion], Awaitable[Body]]
    ) -> GatedAnswer[Body]:
        """A whole (not streamed) answer rendered by `render`, through the caller's grounding guardrail
        (serving.gate): every endpoint's whole answers come this way."""
        return await gated_answer(self, self.gate, request, caller, render)

    def stream_verdict(self, caller: CallerPolicy, completion: Completion) -> VerdictSource | None:
        """What a streamed answer's end awaits under the caller's guardrail, or None when it waits for nothing."""
        return stream_verdict(self.gate, caller, completion)

    async def batch_room(self, model: str) -> None:
        """Waits until batch work may start on the pool `model` names, a chat or a task pool (every chat pool, for
        `auto` or a name no pool has): its interactive queue is empty and the batch share of its budget has room."""
        registry = self.pipeline.pools
        named = registry.get(model) or registry.task(model)
        for pool in [named] if named is not None else registry.pools:
            await pool.admission.wait_batch_room()

    async def start(self, request: GenerationRequest, caller: CallerPolicy) -> Completion:
        """Admit the request and submit it to an engine; refusals raise before anything is held."""
        started = time.monotonic()
        request_id = caller.identity.request_id or f"chatcmpl-{uuid.uuid4().hex}"
        try:
            with ExitStack() as releases:
                submission, settlement = await self._submit(request, caller, request_id, started, releases)
                completion = Completion(submission, releases.pop_all(), settlement, self._bus, self._tasks)
        except BaseException as exc:
            self._metrics.refused.labels(getattr(exc, "code", type(exc).__name__)).inc()
            raise
        mix = modality_mix(submission.modalities)
        self._metrics.pre_engine.labels(submission.pool.name, mix).observe(submission.submitted - started)
        return completion

    async def _route(
        self, request: GenerationRequest, caller: CallerPolicy, plan: MessagePlan
    ) -> tuple[list[ProbedMedia], ModelPool, str, RenderedPrompt]:
        """A named pool is checked against the caller before any media is fetched; `auto` routes on the
        rendered prompt and the media headers. The prompt is rendered once per prompt format."""
        pipeline = self.pipeline
        named = pipeline.named_pool(request.model, plan)
        if named is not None:
            caller.check_model(named[0].name)
        await caller.precheck()
        with step("tessera.media.fetch", **{"tessera.media_items": len(plan.media)}):
            probed = await pipeline.probe(plan)
        tools = request.rendered_tools()
        prompt = await pipeline.render(named[0] if named else pipeline.first_pool(), plan, tools)
        if named is not None:
            pool, reason = named
        else:
            pool, reason = await pipeline.auto_pool(
                plan, prompt, probed, policy=caller.identity.routing_policy, streamed=not request.buffered
            )
            caller.check_model(pool.name)
            if pool.prompt_format != prompt.prompt_format:
                prompt = await pipeline.render(pool, plan, tools)
        require_healthy(pool)
        return probed, pool, reason, prompt

    async def _submit(
        self, request: GenerationRequest, caller: CallerPolicy, request_id: str, started: float, releases: ExitStack
    ) -> tuple[Submission, Settlement]:
        pipeline = self.pipeline
        plan = pipeline.plan(request.messages)
        with step("tessera.route", **{"tessera.model_requested": request.model}) as routed:
            probed, pool, reason, prompt = await self._route(request, caller, plan)
            reason = request.route_reason or reason
            routed.set_attributes({"tessera.model": pool.name, "tessera.route_reason": reason})
        params = _engine_params(request, pool)
        parts = await pipeline.estimate_parts(prompt, probed, pool)
        estimate = sum(parts.values())
        needed = _within_context(estimate, params, pool)
        worst = TokenUsage(
            prompt=estimate,
            completion=needed - estimate,
            text=parts["text"],
            image=parts["image"],
            audio=parts["audio"],
        )

        with step("tessera.quota.reserve", **{"tessera.tokens": worst.total}):
            settlement = Settlement(await caller.reserve(pool.name, worst), self._tasks)
        releases.callback(settlement)
        waited = time.monotonic()
        with step("tessera.admission.wait", **{"tessera.tokens": needed, "tessera.priority": request.priority}):
            ticket = await pool.admission.acquire(needed, request.priority)
        releases.callback(pool.admission.release, ticket)
        self._metrics.admission_wait.labels(pool.name, request.priority).observe(time.monotonic() - waited)

        with step("tessera.media", **{"tessera.media_items": len(probed)}):
            encoded = await self._encoder.encode(
                pool,
                plan,
                probed,
                request_id=request_id,
                allow_degraded=request.allow_degraded,
                scope=pipeline.cache_scope(caller.cache_salt),
            )
        for medium, seconds in encoded.encode_seconds.items():
            cache = "hit" if encoded.cached_tokens.get(medium) else "miss"
            self._metrics.encode_seconds.labels(pool.name, medium, cache).observe(seconds)
        if encoded.degraded:
            prompt = await pipeline.render(pool, encoded.plan, request.rendered_tools())
        cache_salt = pipeline.cache_salt(
            caller.cache_salt, encoded.content_hashes, encoded.plan, request.rendered_tools()
        )
        engine_request = EngineRequest(
            request_id=request_id,
            prompt=prompt.text,
            params=params,
            cache_salt=cache_salt,
            priority=PRIORITIES.get(request.priority, 0),
            prompt_token_ids=prompt.token_ids,
            affinity=affinity_key(encoded, cache_salt, encoded.plan.system_text()),
            restartable=request.buffered,
            **engine_media(encoded, pool),
        )
        parts = await pipeline.estimate_parts(prompt, probed, pool)
        with step("tessera.usage.open"):
            await self._bus.open(
                OpenedRequest(
                    request_id=request_id,
                    model=pool.name,
                    modalities=frozenset(encoded.plan.modalities),
                    caller=caller.identity,
                    text_tokens=parts["text"],
                    image_tokens=parts["image"],
                    audio_tokens=parts["audio"],
                    fingerprint=_fingerprint(encoded.plan.last_user_text(), encoded),
                    endpoint=request.endpoint,
                    trace_id=trace_id_of(),
                    route_reason=reason,
                    attempt_of=request.attempt_of,
                )
            )
        # The engine span lasts until the completion ends; a remote replica continues it (`traceparent`).
        engine_span = tracer.start_span(
            "tessera.engine", attributes={"tessera.model": pool.name, "tessera.request_id": request_id}
        )
        engine_request = replace(engine_request, trace_headers=headers_for(engine_span))
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
            images=await self._findings(pool, encoded, caller),
            tools=request.tools,
            question=encoded.plan.last_user_text(),
            media=tuple((m.item.param, m.raw) for m in probed),
            messages=tuple(request.messages),
            endpoint=request.endpoint,
            ticket=ticket,
            span=engine_span,
        )
        return submission, settlement


def _fingerprint(question: str, encoded: EncodedMedia) -> str:
    """The ask itself, whatever model or sampling: the question and its media, in order."""
    media = [m.content_hash for m in encoded.images] + [a.content_hash for a in encoded.audios]
    return hashlib.sha256("\0".join([question, *media]).encode()).hexdigest()


def _within_context(estimate: int, params: GenerationParams, pool: ModelPool) -> int:
    """The tokens to reserve (prompt plus every choice's max_tokens), once the request fits the context."""
    if estimate + params.max_tokens > pool.max_model_len:
        raise InvalidRequest(
            f"the prompt (about {estimate} tokens) plus max_tokens ({params.max_tokens}) exceeds the context "
            f"of model '{pool.name}' ({pool.max_model_len} tokens)",
            param="messages" if estimate >= pool.max_model_len else "max_tokens",
            code="context_length_exceeded",
        )
    return estimate + params.n * params.max_tokens


def _engine_params(request: GenerationRequest, pool: ModelPool) -> GenerationParams:
    """The request's sampling parameters, with the constraint its tool choice needs."""
    params, tools = request.params, request.tools
    if tools is None:
        return params
    if tools.choice == AUTO and pool.tool_parser is None:
        raise InvalidRequest(
            f"tool_choice 'auto' needs a tool-call parser, and the model '{pool.name}' has none; "
            "use 'required' or name a function",
            param="tool_choice",
            code="unsupported_tool_choice",
        )
    constraint = tools.constraint()
    if constraint is None:
        return params
    if params.structured is not None:
        raise InvalidRequest(
            "response_format cannot be combined with a required or named tool choice",
            param="response_format",
            code="unsupported_parameter",
        )
    return replace(params, structured=constraint)
