"""The in-process engine: vLLM's `AsyncLLM` in this process, its engine core in a child process."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from serving.encoders.families import architecture_of, family_for
from serving.engines.base import (
    EngineCapacity,
    EngineDelta,
    EngineRequest,
    EngineSpec,
    EngineStats,
    SpeechRequest,
    invalid_request,
)
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


class VllmEngine:
    """One model pool's engine: vLLM's `AsyncLLM`, whose engine core runs in a child process."""

    def __init__(self, name: str, llm: Any, stats: EngineStats, model_path: str) -> None:
        self.name = name
        self.model_path = model_path
        self._llm = llm
        self.stats = stats
        self.architecture = architecture_of(llm.model_config.hf_config)
        self.family = family_for(self.architecture)  # how encoder outputs reach this engine; None: it encodes all
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
            max_model_len=spec.max_model_len or None,
            tensor_parallel_size=spec.tensor_parallel_size,
            gpu_memory_utilization=spec.gpu_memory_utilization,
            kv_cache_memory_bytes=spec.kv_cache_bytes,
            enforce_eager=spec.enforce_eager,
            max_num_seqs=spec.max_num_seqs,
            limit_mm_per_prompt=spec.limit_mm_per_prompt,
            enable_prefix_caching=spec.enable_prefix_caching,
            enable_mm_embeds=spec.enable_mm_embeds,
            runner=spec.runner,
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

    @property
    def model_config(self) -> Any:
        """vLLM's own model config, from which the media token counter builds the engine's processor."""
        return self._llm.model_config

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

        from serving.engines.vllm_io import engine_deltas, engine_prompt, sampling_params

        if self._llm.errored:
            raise EngineUnavailable(f"the engine of model '{self.name}' is not running")
        try:
            sampling = sampling_params(request.params)
            async for out in self._llm.generate(
                engine_prompt(request, self.family), sampling, request_id=request.request_id, priority=request.priority
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

    async def embed(self, request_id: str, token_ids: list[int], dimensions: int | None = None) -> list[float]:
        """An embedding pool's pooled (and, as the checkpoint's pooler says, normalised) vector of one input."""
        from vllm import PoolingParams
        from vllm.exceptions import VLLMValidationError
        from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

        if self._llm.errored:
            raise EngineUnavailable(f"the engine of model '{self.name}' is not running")
        try:
            params = PoolingParams(task="embed", dimensions=dimensions)
            out = None
            async for output in self._llm.encode({"prompt_token_ids": token_ids}, params, request_id=request_id):
                out = output
        except VLLMValidationError as exc:
            param = "dimensions" if "dimensions" in str(exc) else "input"
            raise InvalidRequest(str(exc), code="invalid_value", param=param) from exc
        except (EngineDeadError, EngineGenerateError) as exc:
            raise EngineUnavailable(f"the engine of model '{self.name}' failed: {type(exc).__name__}") from exc
        except ValueError as exc:
            raise InvalidRequest(str(exc), code="invalid_value", param="input") from exc
        if out is None:
            raise InternalFailure(f"the engine of model '{self.name}' returned no embedding", code="engine_error")
        return [float(x) for x in out.outputs.data.tolist()]

    async def transcribe(self, request: SpeechRequest) -> AsyncIterator[EngineDelta]:
        """A Whisper-class pool's decoding of one window of audio, from the decoder prompt Tessera built."""
        from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

        from serving.engines.vllm_io import engine_deltas, sampling_params

        if self._llm.errored:
            raise EngineUnavailable(f"the engine of model '{self.name}' is not running")
        prompt = {
            "encoder_prompt": {"prompt": "", "multi_modal_data": {"audio": (request.samples, 16_000)}},
            "decoder_prompt": {"prompt_token_ids": list(request.decoder_token_ids)},
        }
        try:
            sampling = sampling_params(request.params)
            sampling.skip_special_tokens = True
            async for out in self._llm.generate(
                prompt, sampling, request_id=request.request_id, priority=request.priority
            ):
                for delta in engine_deltas(out, request.params.logprobs):
                    if delta.finish_reason == "error":
                        raise InternalFailure(f"the engine of model '{self.name}' failed", code="engine_error")
                    yield delta
        except (EngineDeadError, EngineGenerateError) as exc:
            raise EngineUnavailable(f"the engine of model '{self.name}' failed: {type(exc).__name__}") from exc
        except ValueError as exc:
            raise InvalidRequest(str(exc), code="invalid_value", param="file") from exc

    def shutdown(self) -> None:
        self._llm.shutdown()
