"""Media to encoder outputs: decode each medium once, then encode it through the embedding cache.

Images become the vision pool's embeddings and audio the audio pool's output (log-mel features, or embeddings
where the family's engine takes them), so the engine receives encoder outputs rather than raw media, in the fields
the pool's family adapter names. A medium whose encoder output is cached (by encoder identity and content hash) is
never encoded again; a cached entry is served only when its size is what the engine's own processor counts. When an
encoder fails and the client allowed it, the request goes on without that medium and says so.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from serving.encoders.cache import CachedEmbedding, CacheScope, EmbeddingCache, cache_key
from serving.encoders.counting import AUDIO_SAMPLE_RATE
from serving.encoders.detection import ImageFindings
from serving.encoders.families import AudioEmbedding, AudioFeatures, ImageEmbedding
from serving.encoders.pools import EncoderFailure
from serving.ingest import MediaIngest, MessagePlan, ProbedMedia
from serving.media.audio import LoadedAudio
from serving.media.images import LoadedImage
from serving.pools import ModelPool
from serving.tracing import step

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class EncodedMedia:
    """A request's media, ready for the engine, in the client's order."""

    plan: MessagePlan  # without the dropped modalities when degraded
    images: list[LoadedImage] = field(default_factory=list)
    audios: list[LoadedAudio] = field(default_factory=list)
    image_embeds: list[ImageEmbedding] | None = None  # None: the engine encodes the images itself
    audio_features: list[AudioFeatures | AudioEmbedding] | None = None
    cached_tokens: dict[str, int] = field(default_factory=lambda: {"image": 0, "audio": 0})
    degraded: list[str] = field(default_factory=list)
    scope: CacheScope = field(default_factory=CacheScope)  # whose embedding-cache entries it reads and writes
    encode_seconds: dict[str, float] = field(default_factory=dict)  # per medium, its encoding (decoding not counted)

    @property
    def content_hashes(self) -> set[str]:
        return {m.content_hash for m in self.images} | {m.content_hash for m in self.audios}


class MediaEncoder:
    def __init__(self, ingest: MediaIngest, cache: EmbeddingCache | None) -> None:
        self._ingest = ingest
        self.cache = cache
        self._encoding: dict[str, asyncio.Future[Any]] = {}  # cache key -> the encoding in progress

    async def encode(
        self,
        pool: ModelPool,
        plan: MessagePlan,
        probed: list[ProbedMedia],
        *,
        request_id: str,
        allow_degraded: bool,
        scope: CacheScope | None = None,
    ) -> EncodedMedia:
        with step("tessera.media.decode", **{"tessera.media_items": len(probed)}):
            loaded = await self._ingest.decode(probed)
        out = EncodedMedia(
            plan,
            [m for m in loaded if isinstance(m, LoadedImage)],
            [m for m in loaded if isinstance(m, LoadedAudio)],
            scope=scope or CacheScope(),
        )
        try:
            if out.images and pool.vision is not None:
                out.image_embeds = await self._timed(out, "image", self._encode_images(pool, out.images, out.scope))
            if out.audios and pool.audio is not None:
                out.audio_features = await self._timed(out, "audio", self._encode_audio(pool, out.audios, out.scope))
        except EncoderFailure as exc:
            if not allow_degraded:
                raise
            kind = "audio" if out.image_embeds is not None or not out.images or pool.vision is None else "image"
            logger.warning("request %s: %s; answering without its %s", request_id, exc.message, kind)
            await self._drop(pool, out, kind)
        return out

    @staticmethod
    async def _timed(out: EncodedMedia, medium: str, encoding: Awaitable[tuple[Any, int]]) -> Any:
        """Awaits one medium's encoding in its span, noting its cached tokens and how long it took."""
        started = time.monotonic()
        items = len(out.images if medium == "image" else out.audios)
        with step("tessera.media.encode", **{"tessera.medium": medium, "tessera.items": items}) as span:
            encoded, out.cached_tokens[medium] = await encoding
            span.set_attribute("tessera.cache_hit", out.cached_tokens[medium] > 0)
        out.encode_seconds[medium] = time.monotonic() - started
        return encoded

    async def detect(self, detector: ModelPool, out: EncodedMedia) -> tuple[ImageFindings, ...]:
        """What `detector`'s tower (one with a label head) sees in a request's images, when the pool answering it
        has none: grounding evidence for any pool. Through the same cache and micro-batches as any encoding."""
        if not out.images or not detects(detector):
            return ()
        embeds, _ = await self._encode_images(detector, out.images, out.scope)
        return findings_of(detector, embeds)

    async def _drop(self, pool: ModelPool, out: EncodedMedia, kind: str) -> None:
        out.degraded.append(kind)
        out.plan = out.plan.without(kind)
        out.cached_tokens[kind] = 0
        if kind == "image":
            out.images, out.image_embeds = [], None
            if out.audios and pool.audio is not None:
                out.audio_features, out.cached_tokens["audio"] = await self._encode_audio(pool, out.audios, out.scope)
        else:
            out.audios, out.audio_features = [], None

    async def _encode_audio(
        self, pool: ModelPool, audios: list[LoadedAudio], scope: CacheScope
    ) -> tuple[list[AudioFeatures | AudioEmbedding], int]:
        results = await asyncio.gather(*(self._one_audio(pool, a, scope) for a in audios))
        return [f for f, _ in results], sum(f.tokens for f, hit in results if hit)

    async def _one_audio(
        self, pool: ModelPool, audio: LoadedAudio, scope: CacheScope
    ) -> tuple[AudioFeatures | AudioEmbedding, bool]:
        encoder = pool.audio
        assert encoder is not None
        frames = round(audio.seconds * 100)
        tokens = await pool.media_tokens("audio", (round(audio.seconds * AUDIO_SAMPLE_RATE),))
        if encoder.embeds:
            return await self._through_cache(
                "audio",
                encoder.identity,
                audio.content_hash,
                scope.of(audio.content_hash),
                valid=lambda hit: "embeds" in hit.tensors and hit.token_count == tokens,
                unpack=lambda hit: AudioEmbedding(hit.tensors["embeds"], frames),
                encode=lambda: encoder.encode(audio.samples, tokens),
                pack=lambda e: CachedEmbedding({"embeds": _tensor(e)}, e.tokens),
            )
        return await self._through_cache(
            "audio",
            encoder.identity,
            audio.content_hash,
            scope.of(audio.content_hash),
            valid=lambda hit: "features" in hit.tensors and abs(hit.token_count - frames) <= 1,
            unpack=lambda hit: AudioFeatures(hit.tensors["features"].T.contiguous(), hit.token_count, tokens),
            encode=lambda: encoder.encode(audio.samples, tokens),
            pack=lambda f: CachedEmbedding({"features": _tensor(f).T.contiguous()}, f.frames),
        )

    async def _encode_images(
        self, pool: ModelPool, images: list[LoadedImage], scope: CacheScope
    ) -> tuple[list[ImageEmbedding], int]:
        results = await asyncio.gather(*(self._one_image(pool, img, scope) for img in images))
        return [emb for emb, _ in results], sum(emb.tokens for emb, hit in results if hit)

    async def _one_image(self, pool: ModelPool, image: LoadedImage, scope: CacheScope) -> tuple[ImageEmbedding, bool]:
        import torch

        vision = pool.vision
        assert vision is not None
        expected = await pool.media_tokens("image", image.size)

        def unpack(hit: CachedEmbedding) -> ImageEmbedding:
            t, h, w = (int(x) for x in hit.tensors["grid_thw"].tolist())
            return ImageEmbedding(hit.tensors["embeds"], (t, h, w))

        return await self._through_cache(
            "image",
            vision.identity,
            image.content_hash,
            scope.of(image.content_hash),
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
        scope: str | None,
        *,
        valid: Callable[[CachedEmbedding], bool],
        unpack: Callable[[CachedEmbedding], T],
        encode: Callable[[], Awaitable[T]],
        pack: Callable[[T], CachedEmbedding],
    ) -> tuple[T, bool]:
        """(encoder output, served without encoding it). Entries that do not match the medium are never served.
        Concurrent requests for the same medium share one encoding; a failed cache write only loses the entry."""
        key = cache_key(identity, content_hash, scope)
        if self.cache is not None:
            hit = await self.cache.get(key, kind, valid)
            if hit is not None:
                return unpack(hit), True
        shared = self._encoding.get(key)
        if shared is not None:
            try:
                return await asyncio.shield(shared), True
            except asyncio.CancelledError:
                if not shared.cancelled():  # this request was cancelled, not the encoding it waited for
                    raise
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._encoding[key] = future
        try:
            value = await encode()
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(exc)
                future.exception()  # retrieved: waiters re-raise it, and none may be waiting
            raise
        finally:
            self._encoding.pop(key, None)
        future.set_result(value)
        if self.cache is not None:
            try:
                await self.cache.put(key, kind, content_hash, identity, pack(value))
            except Exception:
                logger.exception("embedding cache: storing %s failed; the next request encodes it again", key[:16])
        return value, False


def _tensor(audio: AudioFeatures | AudioEmbedding) -> Any:
    return audio.features if isinstance(audio, AudioFeatures) else audio.embeds


def engine_media(encoded: EncodedMedia, pool: ModelPool) -> dict[str, Any]:
    """The engine request's media fields: encoder outputs where Tessera encoded, raw media otherwise, and each
    medium's identity in placeholder order (its embedding-cache key where Tessera encoded it, else its content hash
    in the caller's scope)."""
    keys: dict[str, list[str]] = {}
    image_identity = pool.vision.identity if encoded.image_embeds is not None and pool.vision else f"raw:{pool.name}"
    audio_identity = pool.audio.identity if encoded.audio_features is not None and pool.audio else f"raw:{pool.name}"
    if encoded.images:
        keys["image"] = [
            cache_key(image_identity, m.content_hash, encoded.scope.of(m.content_hash)) for m in encoded.images
        ]
    if encoded.audios:
        keys["audio"] = [
            cache_key(audio_identity, a.content_hash, encoded.scope.of(a.content_hash)) for a in encoded.audios
        ]
    return {
        "images": [] if encoded.image_embeds is not None else [m.image for m in encoded.images],
        "audios": [] if encoded.audio_features is not None else [(a.samples, a.sample_rate) for a in encoded.audios],
        "image_embeds": encoded.image_embeds,
        "audio_features": encoded.audio_features,
        "media_keys": keys,
    }


def affinity_key(encoded: EncodedMedia, cache_salt: str | None, system_prompt: str | None) -> str | None:
    """Where a request's reusable state lives: its first image (else its audio clip), else the caller's salt
    plus its system prompt. None: nothing worth following, so the least-loaded replica takes it."""
    first = [m.content_hash for m in encoded.images[:1]] + [a.content_hash for a in encoded.audios[:1]]
    if first:
        return "media:" + first[0]
    if system_prompt:
        return "prefix:" + hashlib.sha256(f"{cache_salt or ''}\0{system_prompt}".encode()).hexdigest()
    return None


def image_findings(pool: ModelPool, encoded: EncodedMedia) -> tuple[ImageFindings, ...]:
    """What the pool's tower saw in each image, read off the embeddings it produced (or the cache held); empty
    where the tower has no label head or the engine encodes the images itself."""
    if not encoded.image_embeds or not detects(pool):
        return ()
    return findings_of(pool, encoded.image_embeds)


def detects(pool: ModelPool) -> bool:
    """Whether the pool's vision tower carries a label head (it was trained for grounding)."""
    return pool.vision is not None and pool.vision.label_head is not None


def findings_of(pool: ModelPool, embeds: list[ImageEmbedding]) -> tuple[ImageFindings, ...]:
    vision = pool.vision
    assert vision is not None
    assert vision.label_head is not None
    return tuple(vision.label_head.findings(e.embeds, e.grid_thw, vision.merge_size) for e in embeds)
