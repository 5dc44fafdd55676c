"""Model pools: an engine plus what the API must know about its checkpoint (names, modalities, media tokens)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from serving.admission import AdmissionController
from serving.encoders.counting import MediaTokenCounter
from serving.encoders.pools import AudioFeaturePool, VisionEncoderPool
from serving.engines.base import EngineClient
from serving.errors import RequestShapeError


def media_token_ids(hf_config: Any) -> dict[str, int]:
    """Placeholder token ids that the processor expands once per image patch group or audio frame."""
    configs = [getattr(hf_config, "thinker_config", None), hf_config]
    found: dict[str, int] = {}
    for cfg in (c for c in configs if c is not None):
        for kind, names in (
            ("image", ("image_token_index", "image_token_id")),
            ("audio", ("audio_token_index", "audio_token_id")),
        ):
            for attr in names:
                value = getattr(cfg, attr, None)
                if kind not in found and isinstance(value, int):
                    found[kind] = value
    return found


def _modalities(hf_config: Any) -> list[str]:
    cfg = getattr(hf_config, "thinker_config", None) or hf_config
    mods = ["text"]
    if getattr(cfg, "vision_config", None) is not None:
        mods.append("image")
    if getattr(cfg, "audio_config", None) is not None:
        mods.append("audio")
    return mods


@dataclass
class ModelPool:
    name: str
    engine: EngineClient
    aliases: list[str] = field(default_factory=list)
    modalities: list[str] = field(default_factory=list)
    media_token_ids: dict[str, int] = field(default_factory=dict)
    created: int = 0
    strength: int = 0
    admission: AdmissionController = field(
        default_factory=lambda: AdmissionController(
            total_blocks=1 << 30, block_size=1, headroom_blocks=0, enabled=False
        )
    )
    vision: VisionEncoderPool | None = None
    audio: AudioFeaturePool | None = None
    # Tessera's own copy: the engine's tokenizer is a pool its input threads borrow from, and borrowing
    # it on the event loop would block every request while the engine is busy.
    own_tokenizer: Any = None

    architecture: str = ""  # the checkpoint's `architectures[0]`
    counter: MediaTokenCounter | None = None  # the engine's own media token counts; None for a text-only pool
    tool_parser: str | None = None  # vLLM's tool-call parser for `tool_choice: auto`
    # The support at which this pool's judgements hold, per form of question (grounding.models.JudgeThresholds),
    # calibrated for its checkpoint (grounding/judge.json beside it, written by build-demo or by an operator after
    # `tessera eval grounding --calibrate-judge`); None: the settings' or the default.
    judge_thresholds: Any = None
    # Prompts are tokenized on worker threads; a fast tokenizer must not be entered by two at once.
    tokenizer_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def tokenizer(self) -> Any:
        return self.own_tokenizer if self.own_tokenizer is not None else self.engine.tokenizer()

    @cached_property
    def prompt_format(self) -> str:
        """Pools whose tokenizer class, vocabulary size and chat template agree render a prompt identically."""
        tok = self.tokenizer()
        template = str(getattr(tok, "chat_template", "") or "")
        size = len(tok) if hasattr(tok, "__len__") else 0
        return hashlib.sha256(f"{type(tok).__name__}\0{size}\0{template}".encode()).hexdigest()[:16]

    @classmethod
    def from_engine(
        cls, name: str, engine: EngineClient, aliases: list[str], created: int, allowed: Sequence[str] | None = None
    ) -> ModelPool:
        hf = engine.hf_config()
        modalities = [m for m in _modalities(hf) if allowed is None or m in allowed or m == "text"]
        return cls(name, engine, aliases, modalities, media_token_ids(hf), created)

    @property
    def max_model_len(self) -> int:
        return self.engine.capacity.max_model_len

    def render_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        try:
            rendered = self.tokenizer().apply_chat_template(
                messages, tools=tools, tokenize=False, add_generation_prompt=True
            )
            return str(rendered)
        except Exception as exc:  # template errors are the conversation's shape, e.g. roles out of order
            raise RequestShapeError(
                f"the messages do not fit the model's chat template: {exc}", code="invalid_messages", param="messages"
            ) from exc

    async def media_tokens(self, medium: str, size: tuple[int, ...]) -> int:
        """The placeholders the engine gives one medium of `size` ((width, height), or (samples,) at 16 kHz)."""
        return 0 if self.counter is None else await self.counter.count(medium, size)

    def count_media_tokens(self, prompt_token_ids: list[int]) -> dict[str, int]:
        """Media tokens in the engine's expanded prompt: exact, from the processor's own placeholders."""
        return {kind: prompt_token_ids.count(token) for kind, token in self.media_token_ids.items()}


def encoding_places(pool: ModelPool) -> dict[str, str]:
    """Where each medium a chat pool takes is encoded: `gateway` (Tessera's encoder pools and embedding cache),
    `features` (the gateway computes and caches the tower's input, the engine runs the tower) or `engine`."""
    places = {}
    if "image" in pool.modalities:
        places["image"] = "gateway" if pool.vision is not None else "engine"
    if "audio" in pool.modalities:
        where = "engine"
        if pool.audio is not None:
            where = "gateway" if pool.audio.embeds else "features"
        places["audio"] = where
    return places


@dataclass
class TaskPool:
    """A pool that serves embeddings (`kind` embedding) or speech to text (`kind` transcription): no chat template,
    no media encoders, and admission by a concurrency budget (each request holds one slot of `max_concurrency`
    while its engine works), since a pooling model holds no KV cache between steps and a Whisper-class model's
    cross-attention holds its encoder's fixed 1500 positions a window."""

    name: str
    kind: str  # embedding | transcription
    engine: Any  # EmbeddingEngine | SpeechEngine (serving.engines.base)
    tokenizer: Any
    aliases: list[str] = field(default_factory=list)
    created: int = 0
    admission: AdmissionController = field(
        default_factory=lambda: AdmissionController(total_blocks=8, block_size=1, headroom_blocks=0)
    )
    audio_tokens_per_second: int = 50  # transcription: quota tokens per second of audio
    english_only: bool = False  # transcription: the checkpoint knows no language or task tokens (tiny.en)
    tokenizer_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def max_model_len(self) -> int:
        return int(self.engine.capacity.max_model_len)

    @property
    def modalities(self) -> list[str]:
        return ["audio"] if self.kind == "transcription" else ["text"]


ENDPOINTS = {
    "chat": "/v1/chat/completions",
    "embedding": "/v1/embeddings",
    "transcription": "/v1/audio/transcriptions",
}


class PoolRegistry:
    """The chat pools (`pools`, which routing, grounding and the encoders work over) and the embedding and
    transcription pools (`tasks`), each found by its name or an alias."""

    def __init__(self, pools: list[ModelPool], tasks: Sequence[TaskPool] = ()) -> None:
        self.pools = pools
        self.tasks = list(tasks)
        self._by_name: dict[str, ModelPool] = {}
        self._tasks: dict[str, TaskPool] = {}
        for pool in pools:
            for key in (pool.name, *pool.aliases):
                self._by_name[key] = pool
        for task in self.tasks:
            for key in (task.name, *task.aliases):
                self._tasks[key] = task

    def names(self) -> list[str]:
        """Every pool's name: the chat pools, then the embedding and transcription pools."""
        return [p.name for p in self.pools] + [t.name for t in self.tasks]

    def get(self, name: str) -> ModelPool | None:
        """The chat pool `name` names, or None."""
        return self._by_name.get(name)

    def task(self, name: str) -> TaskPool | None:
        """The embedding or transcription pool `name` names, or None."""
        return self._tasks.get(name)

    def kind_of(self, name: str) -> str | None:
        if name in self._by_name:
            return "chat"
        found = self._tasks.get(name)
        return found.kind if found is not None else None

    def require_kind(self, name: str, kind: str) -> None:
        """A 400 naming `model` when `name` is a pool of another kind than the endpoint serves."""
        found = self.kind_of(name)
        if found is not None and found != kind:
            raise RequestShapeError(
                f"the model '{name}' is {'an' if found[0] in 'aeiou' else 'a'} {found} model; it serves "
                f"{ENDPOINTS[found]}, not {ENDPOINTS[kind]}",
                code="wrong_model_kind",
                param="model",
            )

    def healthy(self) -> bool:
        return all(p.engine.is_healthy() for p in self.pools) and all(t.engine.is_healthy() for t in self.tasks)
