"""The embedding cache: an in-memory LRU bounded in bytes over a persistent file store with a DB index.

Keys are sha256 over the encoder's identity (weights and preprocessing) and the full sha256 of the media,
so a different checkpoint or resize rule never reads another's entries. Every read from the file store is
checked against the checksum and token count in the index; a mismatch deletes the entry, and the caller
re-encodes and replaces it. Several gateway processes on one machine share the files and the index.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, delete, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from db.models import MediaEmbeddingCacheEntry

logger = logging.getLogger(__name__)


def cache_key(encoder_id: str, content_hash: str, scope: str | None = None) -> str:
    """The entry of one medium under one encoder, private to `scope` (a tenant's salt) unless it is None."""
    if scope is None:
        return hashlib.sha256(f"{encoder_id}:{content_hash}".encode()).hexdigest()
    return hashlib.sha256(f"{encoder_id}:{scope}:{content_hash}".encode()).hexdigest()


@dataclass(frozen=True)
class CacheScope:
    """Whose entries a request may read and write: its tenant's own, except for media the operator pinned,
    which every tenant shares. So a tenant never learns, from cached tokens or timing, what another sent."""

    tenant: str | None = None
    pinned: frozenset[str] = frozenset()

    def of(self, content_hash: str) -> str | None:
        return None if content_hash in self.pinned else self.tenant


@dataclass(frozen=True)
class CachedEmbedding:
    tensors: dict[str, Any]  # name -> torch.Tensor
    token_count: int

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


@dataclass
class CacheStats:
    hits_memory: int = 0
    hits_disk: int = 0
    misses: int = 0
    corrupt: int = 0
    evictions: int = 0
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)

    def count(self, kind: str, outcome: str) -> None:
        bucket = self.by_kind.setdefault(kind, {})
        bucket[outcome] = bucket.get(outcome, 0) + 1


def _checksum(tensors: dict[str, Any]) -> str:
    digest = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        digest.update(name.encode())
        digest.update(str(tuple(t.shape)).encode())
        digest.update(t.numpy().tobytes())
    return digest.hexdigest()


class EmbeddingCache:
    def __init__(
        self,
        root: Path,
        db: Engine,
        *,
        memory_bytes: int = 256 << 20,
        ttl_s: float = 7 * 86400,
        disk_bytes: int = 4 << 30,
    ) -> None:
        self.root = root
        self._db = db
        self._memory_limit = memory_bytes
        self._ttl = timedelta(seconds=ttl_s)
        self._disk_limit = disk_bytes
        self._memory: OrderedDict[str, CachedEmbedding] = OrderedDict()
        self._memory_bytes = 0
        self._lock = threading.Lock()
        self.stats = CacheStats()
        root.mkdir(parents=True, exist_ok=True)

    # -- public, async ------------------------------------------------------------------------------

    async def get(
        self, key: str, kind: str, valid: Callable[[CachedEmbedding], bool] | None = None
    ) -> CachedEmbedding | None:
        """The entry, or None. An entry that `valid` rejects (it does not match the medium) is counted as
        corrupt and dropped from both tiers, so the caller re-encodes and replaces it."""
        found = self._memory_get(key)
        tier = "memory"
        if found is None:
            found = await asyncio.to_thread(self._disk_get, key)
            tier = "disk"
        if found is not None and valid is not None and not valid(found):
            self.stats.corrupt += 1
            self._memory_forget(key)
            await asyncio.to_thread(self._disk_forget, key)
            found = None
        if found is None:
            self.stats.misses += 1
            self.stats.count(kind, "miss")
            return None
        if tier == "memory":
            self.stats.hits_memory += 1
        else:
            self.stats.hits_disk += 1
            self._memory_put(key, found)
        self.stats.count(kind, "hit")
        return found

    async def put(self, key: str, kind: str, content_hash: str, encoder_id: str, entry: CachedEmbedding) -> None:
        self._memory_put(key, entry)
        await asyncio.to_thread(self._disk_put, key, kind, content_hash, encoder_id, entry)

    async def sweep(self) -> int:
        return await asyncio.to_thread(self._sweep)

    def memory_bytes(self) -> int:
        return self._memory_bytes

    # -- tier 1 -------------------------------------------------------------------------------------

    def _memory_get(self, key: str) -> CachedEmbedding | None:
        with self._lock:
            entry = self._memory.get(key)
            if entry is not None:
                self._memory.move_to_end(key)
            return entry

    def _memory_put(self, key: str, entry: CachedEmbedding) -> None:
        size = entry.nbytes
        if size > self._memory_limit:
            return
        with self._lock:
            old = self._memory.pop(key, None)
            if old is not None:
                self._memory_bytes -= old.nbytes
            self._memory[key] = entry
            self._memory_bytes += size
            while self._memory_bytes > self._memory_limit:
                _, evicted = self._memory.popitem(last=False)
                self._memory_bytes -= evicted.nbytes
                self.stats.evictions += 1

    def _memory_forget(self, key: str) -> None:
        with self._lock:
            old = self._memory.pop(key, None)
            if old is not None:
                self._memory_bytes -= old.nbytes

    def forget_memory(self) -> None:
        with self._lock:
            self._memory.clear()
            self._memory_bytes = 0

    # -- tier 2 -------------------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.safetensors"

    def _disk_get(self, key: str) -> CachedEmbedding | None:
        from safetensors.torch import load_file

        now = datetime.now(UTC)
        with Session(self._db) as s:
            row = s.get(MediaEmbeddingCacheEntry, key)
            if row is None:
                return None
            if _aware(row.expires_at) <= now:
                self._drop(s, row, "expired")
                return None
            try:
                tensors = load_file(row.storage_uri)
                valid = _checksum(tensors) == row.checksum and self._token_count(tensors) == row.token_count
            except Exception:  # a truncated or overwritten file is as good as missing
                valid = False
            if not valid:
                self.stats.corrupt += 1
                logger.warning("embedding cache entry %s is corrupt; it will be re-encoded", key[:16])
                self._drop(s, row, "corrupt")
                return None
            s.execute(
                update(MediaEmbeddingCacheEntry)
                .where(col(MediaEmbeddingCacheEntry.cache_key) == key)
                .values(hit_count=MediaEmbeddingCacheEntry.hit_count + 1, last_hit_at=now)
            )
            s.commit()
            return CachedEmbedding(tensors, row.token_count)

    @staticmethod
    def _token_count(tensors: dict[str, Any]) -> int:
        return (
            int(next(iter(tensors.values())).shape[0]) if "embeds" not in tensors else int(tensors["embeds"].shape[0])
        )

    def _disk_put(self, key: str, kind: str, content_hash: str, encoder_id: str, entry: CachedEmbedding) -> None:
        from safetensors.torch import save_file

        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tensors = {k: v.contiguous() for k, v in entry.tensors.items()}
        save_file(tensors, str(tmp))
        os.replace(tmp, path)
        now = datetime.now(UTC)
        row = MediaEmbeddingCacheEntry(
            cache_key=key,
            content_hash=content_hash,
            encoder_id=encoder_id,
            media_kind=kind,
            token_count=entry.token_count,
            storage_uri=str(path),
            checksum=_checksum(tensors),
            size_bytes=path.stat().st_size,
            created_at=now,
            expires_at=now + self._ttl,
        )
        for attempt in range(2):
            try:
                with Session(self._db) as s:
                    s.merge(row)
                    s.commit()
                return
            except IntegrityError:  # another gateway stored the same key between our read and insert
                if attempt:
                    raise

    def _disk_forget(self, key: str) -> None:
        with Session(self._db) as s:
            row = s.get(MediaEmbeddingCacheEntry, key)
            if row is not None:
                self._drop(s, row, "does not match its medium")

    def _drop(self, s: Session, row: MediaEmbeddingCacheEntry, why: str) -> None:
        Path(row.storage_uri).unlink(missing_ok=True)
        s.execute(delete(MediaEmbeddingCacheEntry).where(col(MediaEmbeddingCacheEntry.cache_key) == row.cache_key))
        s.commit()
        logger.debug("dropped embedding cache entry %s (%s)", row.cache_key[:16], why)

    def _sweep(self) -> int:
        """Remove expired entries, then the least recently used until the store fits its byte budget."""
        removed = 0
        now = datetime.now(UTC)
        with Session(self._db) as s:
            for row in s.exec(select(MediaEmbeddingCacheEntry).where(col(MediaEmbeddingCacheEntry.expires_at) <= now)):
                self._drop(s, row, "expired")
                removed += 1
            rows = list(s.exec(select(MediaEmbeddingCacheEntry)))
            total = sum(r.size_bytes for r in rows)
            rows.sort(key=lambda r: _aware(r.last_hit_at or r.created_at))
            for row in rows:
                if total <= self._disk_limit:
                    break
                total -= row.size_bytes
                self._drop(s, row, "over budget")
                removed += 1
        self.stats.evictions += removed
        return removed


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
