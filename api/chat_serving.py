"""Chat completion orchestration: hand the request to the pipeline, run the engine, count usage."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from api.errors import InvalidRequest
from api.grounding import GroundingService
from api.metrics import ServerMetrics, modality_mix
from api.protocol import ChatCompletionRequest, PromptTokensDetails, Usage
from api.quotas import Admission, QuotaGate
from api.settings import Settings
from api.usage_log import UsageLog
from serving.engine import EngineDelta, GenerationParams
from serving.pipeline import Pipeline, PipelineRequest, PreparedRequest
from tenancy.directory import Principal

logger = logging.getLogger(__name__)


@dataclass
class Generation:
    """One request on its way through the engine, accumulating what usage and metrics need."""

    request_id: str
    created: int
    prepared: PreparedRequest
    started: float
    prompt_token_ids: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    num_cached_tokens: int = 0
    first_token_at: float | None = None
    last_token_at: float | None = None
    finish_reason: str | None = None
    submitted: float = 0.0  # when the request left the pipeline for the engine
    principal: Principal | None = None
    admission: Admission = field(default_factory=Admission)

    def timing_headers(self) -> dict[str, str]:
        """Where the time went before the response started, for clients and load tests."""
        headers = {
            "x-tessera-model": self.pool.name,
            "x-tessera-route": self.prepared.route_reason,
            "x-tessera-pre-engine-ms": str(int((self.submitted - self.started) * 1000)),
        }
        if self.first_token_at is not None:
            headers["x-tessera-engine-ttft-ms"] = str(int((self.first_token_at - self.submitted) * 1000))
        headers.update({k: v for k, v in (self.admission.headers or {}).items() if k.startswith("x-ratelimit")})
        return headers

    @property
    def pool(self) -> Any:
        return self.prepared.pool

    @property
    def modalities(self) -> set[str]:
        return self.prepared.modalities

    def usage(self) -> Usage:
        media = self.pool.count_media_tokens(self.prompt_token_ids)
        image, audio = media.get("image", 0), media.get("audio", 0)
        prompt = len(self.prompt_token_ids)
        cached = self.prepared.cached_media_tokens
        details = PromptTokensDetails(
            cached_tokens=self.num_cached_tokens,
            text_tokens=prompt - image - audio,
            image_tokens=image,
            audio_tokens=audio,
            cached_image_tokens=cached.get("image", 0),
            cached_audio_tokens=cached.get("audio", 0),
        )
        completion = len(self.token_ids)
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details=details,
        )


class ChatService:
    def __init__(
        self,
        settings: Settings,
        pipeline: Pipeline,
        metrics: ServerMetrics,
        usage_log: UsageLog,
        quotas: QuotaGate | None = None,
        grounding: GroundingService | None = None,
    ) -> None:
        self._settings = settings
        self._grounding = grounding
        self._quotas = quotas
        self._pipeline = pipeline
        self._metrics = metrics
        self._usage_log = usage_log

    async def prepare(
        self,
        req: ChatCompletionRequest,
        started: float,
        principal: Principal | None = None,
        cache_salt: str | None = None,
    ) -> Generation:
        if req.n != 1:
            raise InvalidRequest(
                "only n=1 is supported; send parallel requests for more choices",
                param="n",
                code="unsupported_parameter",
            )
        params = GenerationParams(
            max_tokens=req.completion_limit() or self._settings.default_max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            seed=req.seed,
            stop=tuple(req.stop_list()),
            presence_penalty=req.presence_penalty,
            frequency_penalty=req.frequency_penalty,
            repetition_penalty=req.repetition_penalty,
            min_tokens=req.min_tokens,
            ignore_eos=req.ignore_eos,
        )
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        holder = Admission()
        gate = None
        if self._quotas is not None and principal is not None:
            quotas, who = self._quotas, principal

            async def gate(pool: str, tokens: int) -> None:
                await quotas.check(who, pool, tokens, holder)

        try:
            prepared = await self._pipeline.prepare(
                PipelineRequest(
                    request_id=request_id,
                    model=req.model,
                    messages=req.messages,
                    params=params,
                    priority=req.priority,
                    allow_degraded=req.allow_degraded,
                    cache_salt=cache_salt,
                    gate=gate,
                )
            )
        except BaseException as exc:
            self._metrics.refused.labels(getattr(exc, "code", type(exc).__name__)).inc()
            if self._quotas is not None:
                await self._quotas.finish(holder, 0)  # refused before the engine: a refusal, not usage
            raise
        now = time.monotonic()
        self._metrics.pre_engine.labels(prepared.pool.name).observe(now - started)
        return Generation(
            request_id, int(time.time()), prepared, started, submitted=now, principal=principal, admission=holder
        )

    async def run(self, gen: Generation) -> AsyncGenerator[EngineDelta, None]:
        """Drive the engine; on every exit the engine request is finished or aborted, its KV blocks are
        released and usage is logged."""
        status = "failed"
        try:
            async for delta in gen.pool.engine.generate(gen.prepared.engine_request):
                self._observe(gen, delta)
                yield delta
            status = "completed"
        except (GeneratorExit, asyncio.CancelledError):
            status = "cancelled"
            raise
        finally:
            if gen.finish_reason is None:
                self._usage_log.spawn(gen.pool.engine.abort(gen.request_id))
            self._pipeline.release(gen.prepared)
            usage = self._finish(gen, status)
            if self._quotas is not None:
                self._usage_log.spawn(self._quotas.finish(gen.admission, usage.total_tokens))

    def _observe(self, gen: Generation, delta: EngineDelta) -> None:
        now = time.monotonic()
        if delta.prompt_token_ids:
            gen.prompt_token_ids = delta.prompt_token_ids
        gen.num_cached_tokens = max(gen.num_cached_tokens, delta.num_cached_tokens)
        if delta.token_ids:
            model = gen.pool.name
            if gen.first_token_at is None:
                gen.first_token_at = now
                self._metrics.ttft.labels(model).observe(now - gen.started)
            elif gen.last_token_at is not None:
                gap = (now - gen.last_token_at) / len(delta.token_ids)
                for _ in delta.token_ids:
                    self._metrics.itl.labels(model).observe(gap)
            gen.last_token_at = now
            gen.token_ids.extend(delta.token_ids)
        if delta.text:
            gen.text.append(delta.text)
        if delta.finish_reason is not None:
            gen.finish_reason = delta.finish_reason

    def _finish(self, gen: Generation, status: str) -> Usage:
        model = gen.pool.name
        now = time.monotonic()
        usage = gen.usage()
        self._metrics.e2e.labels(model).observe(now - gen.started)
        self._metrics.live.finished(model, None if gen.first_token_at is None else gen.first_token_at - gen.started)
        self._metrics.requests.labels(model, modality_mix(gen.modalities), status).inc()
        details = usage.prompt_tokens_details
        for modality, count in (
            ("text", details.text_tokens),
            ("image", details.image_tokens),
            ("audio", details.audio_tokens),
        ):
            if count:
                self._metrics.prompt_tokens.labels(model, modality).inc(count)
        self._metrics.completion_tokens.labels(model).inc(usage.completion_tokens)
        ttft_ms = None if gen.first_token_at is None else int((gen.first_token_at - gen.started) * 1000)
        principal = gen.principal
        written = self._usage_log.record(
            gen.request_id,
            model,
            gen.modalities,
            usage,
            status,
            ttft_ms,
            int((now - gen.started) * 1000),
            tenant_id=principal.tenant_id if principal else None,
            api_key_id=principal.key_id if principal else None,
        )
        audio = gen.prepared.audio_samples
        if self._grounding is not None and status == "completed" and audio:
            self._grounding.schedule(self._usage_log.spawn, written, gen.request_id, "".join(gen.text), audio[0])
        return usage


def finish_reason(reason: str | None) -> str | None:
    """vLLM's reasons mapped onto OpenAI's vocabulary."""
    if reason == "abort":
        return "stop"
    return reason


def response_extras(req: ChatCompletionRequest, gen: Generation) -> dict[str, Any]:
    extras: dict[str, Any] = {}
    if req.return_token_ids:
        extras["prompt_token_ids"] = gen.prompt_token_ids
    if gen.prepared.degraded:
        extras["degraded"] = {
            "dropped_modalities": gen.prepared.degraded,
            "reason": "the encoder pool was unavailable; answered without that media",
        }
    return extras
