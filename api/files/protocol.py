"""OpenAI's file objects: one file, a page of them, and a deletion."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

PURPOSES = ("batch",)  # what a file may be uploaded for; batches read their input from such a file


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    expires_at: int | None
    filename: str
    purpose: str
    status: Literal["processed"] = "processed"
    status_details: None = None

    @classmethod
    def of(cls, row: Any) -> FileObject:
        """A stored file's row (storage.files) as the API shows it."""
        return cls(
            id=row.id,
            bytes=row.bytes,
            created_at=_unix(row.created_at),
            expires_at=_unix(row.expires_at),
            filename=row.filename,
            purpose=row.purpose,
        )


def _unix(moment: datetime) -> int:
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp())


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool = True
