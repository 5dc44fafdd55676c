"""Uploaded files (`/v1/files`): a row per file in the database every gateway shares, its bytes as one file named by
its id on the shared files volume. A file belongs to its tenant (another tenant's id is not found), and is deleted
on request or, past its expiry, by `sweep`. Bytes are written before the row that names them, atomically, so a
listed file always has its content."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from db.models import StoredFile, aware, utcnow
from serving.errors import InvalidRequest, NotFound
from storage.blobs import write_atomically

logger = logging.getLogger(__name__)

PAGE_MAX = 10_000  # OpenAI's limit on one page of files
_FILE_ID = re.compile(r"^file-[0-9a-f]{32}$")


@dataclass(frozen=True)
class FilePage:
    data: list[StoredFile]
    has_more: bool


class FileStore:
    def __init__(self, db: Engine, root: Path, clock: Callable[[], datetime] = utcnow) -> None:
        self._db = db
        self.root = root
        self._clock = clock

    def _path(self, file_id: str) -> Path:
        if not _FILE_ID.match(file_id):
            raise NotFound(f"no file with id '{file_id}'", code="not_found", param="file_id")
        return self.root / file_id[5:7] / file_id

    def create(self, tenant_id: str, purpose: str, filename: str, data: bytes, *, expires_days: int) -> StoredFile:
        file_id = f"file-{uuid.uuid4().hex}"
        write_atomically(self._path(file_id), data)
        now = self._clock()
        row = StoredFile(
            id=file_id,
            tenant_id=tenant_id,
            purpose=purpose,
            filename=filename[:255] or "upload",
            bytes=len(data),
            created_at=now,
            expires_at=now + timedelta(days=expires_days),
        )
        with Session(self._db, expire_on_commit=False) as s:
            s.add(row)
            s.commit()
        return row

    def get(self, tenant_id: str, file_id: str) -> StoredFile:
        with Session(self._db) as s:
            row = s.get(StoredFile, file_id)
        if row is None or row.tenant_id != tenant_id or aware(row.expires_at) <= self._clock():
            raise NotFound(f"no file with id '{file_id}'", code="not_found", param="file_id")
        return row

    def content(self, tenant_id: str, file_id: str) -> bytes:
        self.get(tenant_id, file_id)
        try:
            return self._path(file_id).read_bytes()
        except FileNotFoundError:
            raise NotFound(f"the content of file '{file_id}' is gone", code="not_found", param="file_id") from None

    def page(
        self,
        tenant_id: str,
        *,
        purpose: str | None = None,
        after: str | None = None,
        limit: int = 20,
        order: str = "desc",
    ) -> FilePage:
        if not 1 <= limit <= PAGE_MAX:
            raise InvalidRequest(f"limit must lie in [1, {PAGE_MAX}]", param="limit")
        if order not in ("asc", "desc"):
            raise InvalidRequest("order must be 'asc' or 'desc'", param="order")
        query = select(StoredFile).where(StoredFile.tenant_id == tenant_id, col(StoredFile.expires_at) > self._clock())
        if purpose:
            query = query.where(StoredFile.purpose == purpose)
        newest_first = order == "desc"
        if after is not None:
            try:
                anchor = self.get(tenant_id, after)
            except NotFound:
                raise InvalidRequest(f"no file with id '{after}' to list after", param="after") from None
            key = (col(StoredFile.created_at), col(StoredFile.id))
            later = (key[0] < anchor.created_at) | ((key[0] == anchor.created_at) & (key[1] < anchor.id))
            earlier = (key[0] > anchor.created_at) | ((key[0] == anchor.created_at) & (key[1] > anchor.id))
            query = query.where(later if newest_first else earlier)
        ordering = (
            (col(StoredFile.created_at).desc(), col(StoredFile.id).desc())
            if newest_first
            else (
                col(StoredFile.created_at),
                col(StoredFile.id),
            )
        )
        with Session(self._db) as s:
            rows = list(s.exec(query.order_by(*ordering).limit(limit + 1)).all())
        return FilePage(rows[:limit], len(rows) > limit)

    def delete(self, tenant_id: str, file_id: str) -> None:
        row = self.get(tenant_id, file_id)
        with Session(self._db) as s:
            found = s.get(StoredFile, row.id)
            if found is not None:
                s.delete(found)
                s.commit()
        self._path(row.id).unlink(missing_ok=True)

    def sweep(self, batch: int = 500) -> int:
        """Deletes files past their expiry, `batch` at a time; returns how many went."""
        deleted = 0
        while True:
            with Session(self._db) as s:
                expired = list(
                    s.exec(select(StoredFile).where(col(StoredFile.expires_at) <= self._clock()).limit(batch)).all()
                )
                for row in expired:
                    s.delete(row)
                s.commit()
            for row in expired:
                self._path(row.id).unlink(missing_ok=True)
            if not expired:
                return deleted
            deleted += len(expired)
