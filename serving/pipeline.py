"""The multimodal request pipeline: plan, probe, route, admit, decode, encode (with the cache), fuse."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from serving.admission import PRIORITIES, Ticket
from serving.cache import CachedEmbedding, EmbeddingCache, cache_key
from serving.encoders import AudioFeatures, EncoderFailure, ImageEmbedding, audio_tokens_for
from serving.engine import EngineRequest, GenerationParams
from serving.errors import EngineUnavailable
from serving.fuser import prefix_hashes, segments_of
from serving.ingest import MediaIngest, MessageLike, MessagePlan, ProbedMedia, plan_messages
from serving.media.audio import LoadedAudio
from serving.media.images import LoadedImage
from serving.pools import ModelPool, PoolRegistry
from serving.routing import PoolView, RouteRequest, RoutingPolicy, route

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class PipelineRequest:
    request_id: str
    model: str
    messages: Sequence[MessageLike]
    params: GenerationParams
    priority: str = "interactive"
    allow_degraded: bool = False
    cache_salt: str | None = None
    # Called with (pool name, estimated prompt + max_tokens) before admission: the caller's quotas.
    gate: Callable[[str, int], Awaitable[None]] | None = None


@dataclass
class PreparedRequest:
    pool: ModelPool
    engine_request: EngineRequest
    ticket: Ticket
    modalities: set[str]
    route_reason: str
    estimated_prompt_tokens: int
    prefix_hashes: list[str]
    cached_media_tokens: dict[str, int] = field(default_factory=dict)
    degraded: list[str] = field(default_factory=list)
    audio_samples: list[Any] = field(default_factory=list)  # the decoded clips (float32 mono 16 kHz), for grounding


class Pipeline:
    def __init__(
        self,
        pools: PoolRegistry,
        ingest: MediaIngest,
        cache: EmbeddingCache | None,
        *,
        max_images: int,
        pinned_media: set[str] | None = None,
        shared_cache_salt: str | None = None,
        routing: RoutingPolicy | None = None,
    ) -> None:
        self._pools = pools
        self._ingest = ingest
        self.cache = cache
        self._max_images = max_images
        self._pinned = pinned_media or set()
        self._shared_salt = shared_cache_salt
        self._routing = routing or RoutingPolicy()

    async def prepare(self, r: PipelineRequest) -> PreparedRequest:
        plan = plan_messages(r.messages, max_images=self._max_images)
        probed = await self._ingest.probe(plan)
        first = self._pools.pools[0]
        text = " ".join(_texts(plan))
        estimate = self._estimate(first, first.render_prompt(plan.messages), probed)
        name, reason = route(RouteRequest(r.model, plan.modalities, estimate, text), self._views(), self._routing)
        pool = self._pools.get(name)
        assert pool is not None
        if not pool.engine.is_healthy():
            raise EngineUnavailable(f"the engine of model '{pool.name}' is not running")
        prompt = pool.render_prompt(plan.messages)
        estimate = self._estimate(pool, prompt, probed)
        if r.gate is not None:
            await r.gate(pool.name, estimate + r.params.max_tokens)
        ticket = await pool.admission.acquire(estimate + r.params.max_tokens, r.priority)
        try:
            return await self._finish(r, pool, plan, probed, prompt, ticket, reason, estimate)
        except BaseException:
            pool.admission.release(ticket)
            raise

    async def _finish(
        self,
        r: PipelineRequest,
        pool: ModelPool,
        plan: MessagePlan,
        probed: list[ProbedMedia],
        prompt: str,
        ticket: Ticket,
        reason: str,
        estimate: int,
    ) -> PreparedRequest:
        loaded = await self._ingest.decode(probed)
        images = [m for m in loaded if isinstance(m, LoadedImage)]
        audios = [m for m in loaded if isinstance(m, LoadedAudio)]
        cached: dict[str, int] = {"image": 0, "audio": 0}
        degraded: list[str] = []
        embeds: list[ImageEmbedding] | None = None
        features: list[AudioFeatures] | None = None
        try:
            if images and pool.vision is not None:
                embeds, cached["image"] = await self._encode_images(pool, images)
            if audios and pool.audio is not None:
                features, cached["audio"] = await self._encode_audio(pool, audios)
        except EncoderFailure as exc:
            if not r.allow_degraded:
                raise
            kind = "audio" if embeds is not None or not images or pool.vision is None else "image"
            logger.warning("request %s: %s; answering without its %s", r.request_id, exc.message, kind)
            degraded.append(kind)
            plan = _without(plan, kind)
            prompt = pool.render_prompt(plan.messages)
            loaded = [
                m for m in loaded if (isinstance(m, LoadedImage) if kind == "audio" else isinstance(m, LoadedAudio))
            ]
            images = [m for m in loaded if isinstance(m, LoadedImage)]
            audios = [m for m in loaded if isinstance(m, LoadedAudio)]
            embeds = embeds if kind == "audio" else None
            features = None
            if kind == "image" and audios and pool.audio is not None:
                features, cached["audio"] = await self._encode_audio(pool, audios)
            cached[kind] = 0
        keys = [cache_key(self._identity(pool, m), m.content_hash) for m in loaded]
        media_hashes = {m.content_hash for m in loaded}
        salt = (
            self._shared_salt if (self._shared_salt and media_hashes and media_hashes <= self._pinned) else r.cache_salt
        )
        engine_request = EngineRequest(
            request_id=r.request_id,
            prompt=prompt,
            images=[] if embeds is not None else [m.image for m in images],
            audios=[] if features is not None else [(a.samples, a.sample_rate) for a in audios],
            params=r.params,
            cache_salt=salt,
            image_embeds=embeds,
            audio_features=features,
            priority=PRIORITIES.get(r.priority, 0),
        )
        return PreparedRequest(
            pool,
            engine_request,
            ticket,
            plan.modalities,
            reason,
            estimate,
            prefix_hashes(segments_of(plan, keys)),
            cached,
            degraded,
            [a.samples for a in audios],
        )

    @staticmethod
    def _identity(pool: ModelPool, medium: LoadedImage | LoadedAudio) -> str:
        encoder = pool.vision if isinstance(medium, LoadedImage) else pool.audio
        return encoder.identity if encoder is not None else f"engine:{pool.name}"

    async def _encode_audio(self, pool: ModelPool, audios: list[LoadedAudio]) -> tuple[list[AudioFeatures], int]:
        results = await asyncio.gather(*(self._one_audio(pool, a) for a in audios))
        return [f for f, _ in results], sum(f.tokens for f, hit in results if hit)

    async def _one_audio(self, pool: ModelPool, audio: LoadedAudio) -> tuple[AudioFeatures, bool]:
        encoder = pool.audio
        assert encoder is not None
        frames = round(audio.seconds * 100)
        return await self._through_cache(
            "audio",
            encoder.identity,
            audio.content_hash,
            valid=lambda hit: "features" in hit.tensors and abs(hit.token_count - frames) <= 1,
            unpack=lambda hit: AudioFeatures(hit.tensors["features"].T.contiguous(), hit.token_count),
            encode=lambda: encoder.encode(audio.samples),
            pack=lambda f: CachedEmbedding({"features": f.features.T.contiguous()}, f.frames),
        )

    async def _encode_images(self, pool: ModelPool, images: list[LoadedImage]) -> tuple[list[ImageEmbedding], int]:
        results = await asyncio.gather(*(self._one_image(pool, img) for img in images))
        return [emb for emb, _ in results], sum(emb.tokens for emb, hit in results if hit)

    async def _one_image(self, pool: ModelPool, image: LoadedImage) -> tuple[ImageEmbedding, bool]:
        import torch

        vision = pool.vision
        assert vision is not None
        expected = vision.geometry.tokens_for(*image.size)

        def unpack(hit: CachedEmbedding) -> ImageEmbedding:
            t, h, w = (int(x) for x in hit.tensors["grid_thw"].tolist())
            return ImageEmbedding(hit.tensors["embeds"], (t, h, w))

        return await self._through_cache(
            "image",
            vision.identity,
            image.content_hash,
            valid=lambda hit: hit.token_count == expected and "grid_thw" in hit.tensors,
            unpack=unpack,
            encode=lambda: vision.encode(image.image),
            pack=lambda e: CachedEmbedding({"embeds": e.embeds, "grid_thw": torch.tensor(e.grid_thw)}, e.tokens),
        )

    async def _through_cache(
        self,
        kind: str,
        identity: str,
        content_hash: str,
        *,
        valid: Callable[[CachedEmbedding], bool],
        unpack: Callable[[CachedEmbedding], T],
        encode: Callable[[], Awaitable[T]],
        pack: Callable[[T], CachedEmbedding],
    ) -> tuple[T, bool]:
        """(encoder output, served from the cache). Entries that do not match the medium are never served."""
        key = cache_key(identity, content_hash)
        if self.cache is not None:
            hit = await self.cache.get(key, kind, valid)
            if hit is not None:
                return unpack(hit), True
        value = await encode()
        if self.cache is not None:
            await self.cache.put(key, kind, content_hash, identity, pack(value))
        return value, False

    def _estimate(self, pool: ModelPool, prompt: str, probed: list[ProbedMedia]) -> int:
        """Fused prompt tokens from the template and the media headers, before any media is decoded."""
        tokens = len(pool.tokenizer().encode(prompt, add_special_tokens=False)) - len(probed)
        for p in probed:
            if p.item.kind == "image":
                tokens += pool.geometry.tokens_for(p.width, p.height) if pool.geometry else 0
            else:
                tokens += audio_tokens_for(p.seconds)
        return tokens

    def _views(self) -> list[PoolView]:
        return [PoolView(p.name, p.aliases, p.modalities, p.strength, _headroom(p)) for p in self._pools.pools]

    def release(self, prepared: PreparedRequest) -> None:
        prepared.pool.admission.release(prepared.ticket)


def _headroom(pool: ModelPool) -> Any:
    return lambda: pool.admission.free_fraction if pool.engine.is_healthy() else 0.0


def _texts(plan: MessagePlan) -> list[str]:
    out = []
    for m in plan.messages:
        if m["role"] != "user":
            continue
        content = m["content"]
        out.extend([content] if isinstance(content, str) else [p["text"] for p in content if p["type"] == "text"])
    return out


def _without(plan: MessagePlan, kind: str) -> MessagePlan:
    messages = []
    for m in plan.messages:
        content = m["content"]
        if not isinstance(content, str):
            content = [p for p in content if p["type"] != kind] or [{"type": "text", "text": ""}]
        messages.append({"role": m["role"], "content": content})
    return MessagePlan(messages, [item for item in plan.media if item.kind != kind])
