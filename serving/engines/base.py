"""The engine interface serving needs (generate, abort, health, capacity) and the types that cross it; the
in-process engine (serving.engines.inprocess) and the remote one (serving.engines.remote) implement it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from serving.errors import InvalidRequest

logger = logging.getLogger(__name__)


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
    runner: str = "generate"  # vLLM's runner: `generate`, or `pooling` for an embedding pool


@dataclass(frozen=True)
class StructuredOutput:
    """A constraint on what the engine may generate, enforced by vLLM's structured-output backend."""

    json_schema: dict[str, Any] | None = None  # the answer validates against this schema
    json_object: bool = False  # the answer is any JSON object
    choice: tuple[str, ...] | None = None  # the answer is exactly one of these
    regex: str | None = None  # the answer matches this regular expression

    def vllm_fields(self) -> dict[str, Any]:
        """The constraint in the field names of vLLM's `structured_outputs` (its API and `StructuredOutputsParams`)."""
        if self.json_schema is not None:
            return {"json": self.json_schema}
        if self.json_object:
            return {"json_object": True}
        if self.choice is not None:
            return {"choice": list(self.choice)}
        return {"regex": self.regex}


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
    trace_headers: dict[str, str] = field(default_factory=dict)  # `traceparent` of the engine span, for a replica


@dataclass(frozen=True)
class SpeechRequest:
    """One window (at most 30 s) of audio for a Whisper-class engine, with the decoder prompt Tessera built."""

    request_id: str
    samples: Any  # float32 mono 16 kHz
    decoder_token_ids: tuple[int, ...]
    params: GenerationParams
    priority: int = 0
    # Nothing of the window reaches the client before the transcript is whole: a remote engine may restart it on
    # another replica after a replica fault, even mid-window (as `EngineRequest.restartable`).
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


class EmbeddingEngine(Protocol):
    """An engine of an embedding pool: one pooled, normalised vector per tokenized input."""

    name: str
    model_path: str
    capacity: EngineCapacity

    def replicas(self) -> list[dict[str, Any]]: ...

    async def embed(self, request_id: str, token_ids: list[int], dimensions: int | None = None) -> list[float]: ...

    def is_healthy(self) -> bool: ...

    def hf_config(self) -> Any: ...

    def tokenizer(self) -> Any: ...

    def shutdown(self) -> None: ...


class SpeechEngine(Protocol):
    """An engine of a transcription pool: a Whisper-class encoder-decoder, one window of audio per request."""

    name: str
    model_path: str
    capacity: EngineCapacity

    def replicas(self) -> list[dict[str, Any]]: ...

    def transcribe(self, request: SpeechRequest) -> AsyncIterator[EngineDelta]: ...

    async def abort(self, request_id: str) -> None: ...

    def is_healthy(self) -> bool: ...

    def hf_config(self) -> Any: ...

    def tokenizer(self) -> Any: ...

    def shutdown(self) -> None: ...


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
