"""The engine interface the API needs, and its implementation on an in-process vLLM `AsyncLLM`."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from serving.errors import EngineUnavailable, InternalFailure, InvalidRequest

logger = logging.getLogger(__name__)

# vLLM phones home unless told not to; the server must reach nothing but 127.0.0.1 by default.
ENGINE_ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    # One engine-core process per engine, running the model itself: one spawn instead of two.
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}


@dataclass(frozen=True)
class EngineCapacity:
    num_blocks: int
    block_size: int
    max_model_len: int

    @property
    def tokens(self) -> int:
        return self.num_blocks * self.block_size


@dataclass
class EngineSpec:
    """How to start one engine; built by the API from its settings."""

    model: str
    dtype: str = "float32"
    max_model_len: int = 4096
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    kv_cache_bytes: int | None = 1 << 30
    enforce_eager: bool = True
    cpu_threads: int = 1
    max_num_seqs: int = 32
    limit_mm_per_prompt: dict[str, int] = field(default_factory=lambda: {"image": 8, "audio": 1, "video": 0})
    enable_prefix_caching: bool = True
    enable_mm_embeds: bool = False


@dataclass(frozen=True)
class StructuredOutput:
    """A constraint on what the engine may generate, enforced by vLLM's structured-output backend."""

    json_schema: dict[str, Any] | None = None  # the answer validates against this schema
    json_object: bool = False  # the answer is any JSON object


@dataclass(frozen=True)
class GenerationParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_tokens: int = 0
    ignore_eos: bool = False
    n: int = 1  # choices generated from the one prompt
    logprobs: int | None = None  # None: no logprobs; k: the sampled token's and the k most likely ones
    structured: StructuredOutput | None = None
    logit_bias: dict[int, float] | None = None  # token id -> added to its logit


@dataclass(frozen=True)
class EngineRequest:
    request_id: str
    prompt: str
    images: list[Any]
    audios: list[tuple[Any, int]]
    params: GenerationParams
    cache_salt: str | None = None
    priority: int = 0  # lower runs first in the engine's scheduler
    image_embeds: list[Any] | None = None  # ImageEmbedding, in the order of the prompt's image placeholders
    audio_features: list[Any] | None = None  # AudioFeatures, in the order of the prompt's audio placeholders
    # Per modality, each medium's identity (encoder and content), in placeholder order: remote replicas key
    # their prefix and processor caches on it.
    media_keys: dict[str, list[str]] = field(default_factory=dict)
    prompt_token_ids: tuple[int, ...] | None = None  # the rendered prompt, tokenized; None: the engine tokenizes
    affinity: str | None = None  # requests sharing it go to the replica that already holds their media or prefix
    # Nothing of the answer reaches the client before it is whole: a remote engine may then restart it on another
    # replica after a replica fault, even mid-answer, and yields a replica's deltas only once it has finished.
    restartable: bool = False


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log probability, and the most likely alternatives at its position."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class EngineDelta:
    """New tokens of one choice since its previous delta; its last delta carries `finish_reason`."""

    text: str
    token_ids: list[int]
    prompt_token_ids: list[int]
    num_cached_tokens: int
    finish_reason: str | None
    index: int = 0  # which of the request's `n` choices
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass
class EngineStats:
    """Live engine-side state, as the engine's own scheduler reports it."""

    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    preemptions_total: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0


class EngineClient(Protocol):
    name: str
    model_path: str
    capacity: EngineCapacity

    @property
    def stats(self) -> EngineStats: ...

    def replicas(self) -> list[dict[str, Any]]:
        """Each remote replica's state, for /health, /metrics and the admin overview; [] in-process."""
        ...

    def generate(self, request: EngineRequest) -> AsyncIterator[EngineDelta]: ...

    async def abort(self, request_id: str) -> None: ...

    def is_healthy(self) -> bool: ...

    async def has_work(self, wait_s: float = 5.0) -> bool: ...

    def num_unfinished(self) -> int: ...

    def hf_config(self) -> Any: ...

    def tokenizer(self) -> Any: ...

    def shutdown(self) -> None: ...


def _stat_logger_factory(stats: EngineStats) -> Any:
    from vllm.v1.metrics.loggers import StatLoggerBase

    class _Recorder(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self._stats = stats

        def record(
            self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None, engine_idx: int = 0
        ) -> None:
            if scheduler_stats is not None:
                self._stats.running = scheduler_stats.num_running_reqs
                self._stats.waiting = scheduler_stats.num_waiting_reqs
                self._stats.kv_cache_usage = scheduler_stats.kv_cache_usage
                prefix = getattr(scheduler_stats, "prefix_cache_stats", None)
                if prefix is not None:
                    self._stats.prefix_cache_queries += getattr(prefix, "queries", 0)
                    self._stats.prefix_cache_hits += getattr(prefix, "hits", 0)
            if iteration_stats is not None:
                self._stats.preemptions_total += iteration_stats.num_preempted_reqs

        def log_engine_initialized(self) -> None:
            return None

    return _Recorder


def invalid_request(message: str, params: GenerationParams, parameter: str | None = None) -> InvalidRequest:
    """An engine's refusal of a request as the client's error, named after the part of the request at fault."""
    if parameter:  # a sampling parameter vLLM refused; its names are OpenAI's
        return InvalidRequest(message, code="invalid_value", param=parameter)
    if "context length" in message:
        return InvalidRequest(message, code="context_length_exceeded", param="messages")
    if params.structured is not None and any(w in message.lower() for w in ("schema", "grammar", "json", "struct")):
        return InvalidRequest(
            f"the response format cannot be enforced: {message}",
            code="invalid_response_format",
            param="response_format",
        )
    return InvalidRequest(message, code="invalid_prompt", param="messages")


class VllmEngine:
    """One model pool's engine: vLLM's `AsyncLLM`, whose engine core runs in a child process."""

    def __init__(self, name: str, llm: Any, stats: EngineStats, model_path: str) -> None:
        self.name = name
        self.model_path = model_path
        self._llm = llm
        self.stats = stats
        cache = llm.vllm_config.cache_config
        self.capacity = EngineCapacity(
            num_blocks=int(cache.num_gpu_blocks or 0),
            block_size=int(cache.block_size),
            max_model_len=int(llm.model_config.max_model_len),
        )

    @classmethod
    def start(cls, name: str, spec: EngineSpec) -> VllmEngine:
        """Start the engine; blocks for the model load (seconds on CPU), so call it off the event loop."""
        os.environ.update(ENGINE_ENV)
        # Read by the spawned engine process: each engine gets its own thread budget.
        os.environ["OMP_NUM_THREADS"] = str(spec.cpu_threads)
        from vllm.config import StructuredOutputsConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            model=spec.model,
            served_model_name=[name],
            dtype=spec.dtype,
            max_model_len=spec.max_model_len,
            tensor_parallel_size=spec.tensor_parallel_size,
            gpu_memory_utilization=spec.gpu_memory_utilization,
            kv_cache_memory_bytes=spec.kv_cache_bytes,
            enforce_eager=spec.enforce_eager,
            max_num_seqs=spec.max_num_seqs,
            limit_mm_per_prompt=spec.limit_mm_per_prompt,
            enable_prefix_caching=spec.enable_prefix_caching,
            enable_mm_embeds=spec.enable_mm_embeds,
            scheduling_policy="priority",
            # Compact JSON under structured outputs: a grammar that allows any whitespace lets a weak model pad
            # until max_tokens.
            structured_outputs_config=StructuredOutputsConfig(backend="xgrammar", disable_any_whitespace=True),
            disable_log_stats=True,
        )
        stats = EngineStats()
        started = time.monotonic()
        llm = AsyncLLM.from_engine_args(args, stat_loggers=[_stat_logger_factory(stats)])
        engine = cls(name, llm, stats, spec.model)
        logger.info(
            "engine %s ready in %.1fs: %d KV blocks of %d tokens, max_model_len %d",
            name,
            time.monotonic() - started,
            engine.capacity.num_blocks,
            engine.capacity.block_size,
            engine.capacity.max_model_len,
        )
        return engine

    def hf_config(self) -> Any:
        return self._llm.model_config.hf_config

    def replicas(self) -> list[dict[str, Any]]:
        return []

    def tokenizer(self) -> Any:
        return self._llm.get_tokenizer()

    def is_healthy(self) -> bool:
        return not self._llm.errored

    def num_unfinished(self) -> int:
        return int(self._llm.get_num_unfinished_requests())

    async def has_work(self, wait_s: float = 5.0) -> bool:
        """Asks the engine core itself whether its scheduler still holds requests."""
        if self._llm.errored:
            return False
        try:
            return bool(await asyncio.wait_for(self._llm.engine_core.call_utility_async("has_work"), wait_s))
        except TimeoutError as exc:
            raise EngineUnavailable(f"the engine of model '{self.name}' does not answer") from exc

    async def abort(self, request_id: str) -> None:
        if not self._llm.errored:
            await self._llm.abort(request_id)

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineDelta]:
        from vllm.exceptions import VLLMClientError
        from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

        from serving.vllm_io import engine_deltas, engine_prompt, sampling_params

        if self._llm.errored:
            raise EngineUnavailable(f"the engine of model '{self.name}' is not running")
        try:
            sampling = sampling_params(request.params)
            async for out in self._llm.generate(
                engine_prompt(request), sampling, request_id=request.request_id, priority=request.priority
            ):
                for delta in engine_deltas(out, request.params.logprobs):
                    if delta.finish_reason == "error":
                        message = f"the engine of model '{self.name}' failed on this request"
                        raise InternalFailure(message, code="engine_error")
                    yield delta
        except (EngineDeadError, EngineGenerateError) as exc:
            raise EngineUnavailable(f"the engine of model '{self.name}' failed: {type(exc).__name__}") from exc
        except (VLLMClientError, ValueError) as exc:
            # vLLM validates the processed prompt (length, media counts) and any structured-output
            # constraint before scheduling it.
            raise invalid_request(str(exc), request.params, getattr(exc, "parameter", None)) from exc

    def shutdown(self) -> None:
        self._llm.shutdown()
