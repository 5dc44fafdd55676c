"""SQLModel tables shared by every package."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlmodel import Field, SQLModel

MODALITY_TEXT, MODALITY_IMAGE, MODALITY_AUDIO = 1, 2, 4


def utcnow() -> datetime:
    return datetime.now(UTC)


class InferenceRequest(SQLModel, table=True):
    """One row per request that reached an engine: what it carried, what it cost in tokens, how it ended."""

    __tablename__ = "inference_requests"

    request_id: str = Field(primary_key=True, max_length=64)
    model_variant: str = Field(max_length=64, index=True)
    modality_mask: int = Field(ge=1, le=7)
    text_tokens: int = 0
    vision_tokens: int = 0
    audio_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    status: str = Field(max_length=16)  # completed | cancelled | failed
    ttft_ms: int | None = None
    total_latency_ms: int | None = None
    created_at: datetime = Field(default_factory=utcnow, index=True)


class MediaEmbeddingCacheEntry(SQLModel, table=True):
    """Index of the persistent embedding cache: one row per (media, encoder) pair; tensors live in files."""

    __tablename__ = "media_embedding_cache"

    cache_key: str = Field(primary_key=True, max_length=64)  # sha256(encoder identity, content hash)
    content_hash: str = Field(max_length=64, index=True)  # full sha256 of the canonical media
    encoder_id: str = Field(max_length=64)
    media_kind: str = Field(max_length=8)  # image | audio
    token_count: int
    storage_uri: str
    checksum: str = Field(max_length=64)  # sha256 of the stored tensor bytes
    size_bytes: int
    hit_count: int = 0
    last_hit_at: datetime | None = None
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime = Field(index=True)
