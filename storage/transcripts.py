"""The transcription results cache: a tenant's transcript of an audio file at temperature 0, answered again when the
same file (by the content hash of its decoded samples) comes back with the same model and options. Kept in the
database, so every gateway answers from it, and for `keep_days`."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, delete
from sqlmodel import Session, col

from db.models import TranscriptionCacheEntry, utcnow


def transcript_key(tenant_id: str, content_hash: str, model: str, *options: str) -> str:
    return hashlib.sha256("\0".join([tenant_id, content_hash, model, *options]).encode()).hexdigest()


class TranscriptStore:
    def __init__(self, db: Engine, keep_days: int, clock: Callable[[], datetime] = utcnow) -> None:
        self._db = db
        self._keep = timedelta(days=keep_days)
        self._clock = clock

    @property
    def enabled(self) -> bool:
        return self._keep > timedelta(0)

    def get(self, key: str, tenant_id: str) -> TranscriptionCacheEntry | None:
        with Session(self._db) as s:
            row = s.get(TranscriptionCacheEntry, key)
            if row is None or row.tenant_id != tenant_id:
                return None
            created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
            if created < self._clock() - self._keep:
                return None
            s.expunge(row)
            return row

    def put(self, key: str, tenant_id: str, body: str, audio_ms: int, output_tokens: int) -> None:
        with Session(self._db) as s:
            s.merge(
                TranscriptionCacheEntry(
                    cache_key=key,
                    tenant_id=tenant_id,
                    body=body,
                    audio_ms=audio_ms,
                    output_tokens=output_tokens,
                    created_at=self._clock(),
                )
            )
            s.commit()

    def sweep(self) -> int:
        """Deletes transcripts older than `keep_days`."""
        with Session(self._db) as s:
            result = s.exec(  # type: ignore[call-overload]
                delete(TranscriptionCacheEntry).where(
                    col(TranscriptionCacheEntry.created_at) < self._clock() - self._keep
                )
            )
            s.commit()
            return int(result.rowcount or 0)
