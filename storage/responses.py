"""Stored responses: per tenant, in the database every gateway replica shares, with their media in the blob store.

A stored response keeps the response object as returned, this request's own input items (each with an `id`;
media parts hold a content-hash reference, `media.sha256`, into the blob store instead of their bytes) and the id
of the response it continued. A conversation is the chain of `previous_response_id`s, read oldest first. Another
tenant's id is not found, never forbidden: ids do not leak across tenants. A response is deleted on request or,
past its tenant's retention, by `sweep`; media no other stored response uses go with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session, col, delete, select

from db.models import ConversationMedia, StoredResponse, StoredResponseMedia, aware, utcnow
from serving.errors import InvalidRequest, NotFound
from storage.blobs import BlobStore

logger = logging.getLogger(__name__)

MAX_CHAIN = 200  # responses one conversation may chain; a longer chain is refused rather than read without end
PAGE_MAX = 100


def media_of(items: list[dict[str, Any]]) -> set[str]:
    """The sha256 of every media part the items reference."""
    found = set()
    for item in items:
        content = item.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("media"), dict):
                found.add(str(part["media"]["sha256"]))
    return found


def media_in_use(s: Session, digests: set[str]) -> set[str]:
    """Which of the blobs `digests` a stored response or a conversation still uses: the rest may be deleted."""
    if not digests:
        return set()
    by_responses = s.exec(select(StoredResponseMedia.sha256).where(col(StoredResponseMedia.sha256).in_(digests))).all()
    by_conversations = s.exec(select(ConversationMedia.sha256).where(col(ConversationMedia.sha256).in_(digests))).all()
    return set(by_responses) | set(by_conversations)


@dataclass(frozen=True)
class Conversation:
    turns: list[StoredResponse]  # oldest first, up to and including `current`
    current: str
    continued_by: list[StoredResponse]


@dataclass(frozen=True)
class Page:
    data: list[dict[str, Any]]
    has_more: bool

    def wire(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": self.data,
            "first_id": self.data[0]["id"] if self.data else None,
            "last_id": self.data[-1]["id"] if self.data else None,
            "has_more": self.has_more,
        }


class ResponseStore:
    def __init__(self, db: Engine, blobs: BlobStore, clock: Callable[[], datetime] = utcnow) -> None:
        self._db = db
        self.blobs = blobs
        self._clock = clock

    def save(
        self,
        *,
        tenant_id: str,
        body: dict[str, Any],
        input_items: list[dict[str, Any]],
        media: dict[str, bytes],
        request_id: str,
        retention_days: int,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
    ) -> bool:
        """Keeps a response (a background one as it is queued, then again when it ends). `media` holds the bytes of
        every sha256 the input items reference; they are written to the blob store before the row that names
        them, so no stored row ever points at nothing. A response cancelled in the meantime stays cancelled: then
        nothing is saved and the answer is False."""
        for sha256, data in media.items():
            if self.blobs.put(data) != sha256:
                raise ValueError(f"media bytes do not match their digest {sha256}")
        now = self._clock()
        with Session(self._db) as s:
            row = s.get(StoredResponse, body["id"], with_for_update=True)
            if row is not None and (row.tenant_id != tenant_id or row.status == "cancelled"):
                return False
            created = aware(row.created_at) if row is not None else now
            fields: dict[str, Any] = {
                "request_id": request_id,
                "previous_response_id": previous_response_id,
                "conversation_id": conversation_id,
                "model": body["model"],
                "status": body["status"],
                "body": body,
                "input_items": input_items,
                "expires_at": created + timedelta(days=retention_days),
            }
            if row is None:
                row = StoredResponse(id=body["id"], tenant_id=tenant_id, created_at=created, **fields)
            else:
                for name, value in fields.items():
                    setattr(row, name, value)
            s.add(row)
            s.exec(delete(StoredResponseMedia).where(col(StoredResponseMedia.response_id) == row.id))  # type: ignore[call-overload]
            s.flush()
            for sha256 in sorted(media_of(input_items)):
                s.add(StoredResponseMedia(response_id=row.id, sha256=sha256))
            s.commit()
        return True

    def set_status(self, tenant_id: str, response_id: str, status: str, error: dict[str, Any] | None = None) -> bool:
        """Moves a stored response to `status` (a background one: in progress, failed, cancelled), unless it was
        cancelled already; False when it was not moved."""
        with Session(self._db) as s:
            row = s.get(StoredResponse, response_id, with_for_update=True)
            if row is None or row.tenant_id != tenant_id or row.status == "cancelled":
                return False
            row.status = status
            row.body = {**row.body, "status": status, **({"error": error} if error is not None else {})}
            s.add(row)
            s.commit()
        return True

    def get(self, tenant_id: str, response_id: str) -> StoredResponse:
        with Session(self._db) as s:
            row = s.get(StoredResponse, response_id)
        if row is None or row.tenant_id != tenant_id or aware(row.expires_at) <= self._clock():
            raise NotFound(f"no response with id '{response_id}'", code="not_found", param="response_id")
        return row

    def chain(self, tenant_id: str, response_id: str, *, whole: bool = True) -> list[StoredResponse]:
        """The conversation that ends at `response_id`, oldest first. With `whole` false, as far back as it is
        still stored and no further than `MAX_CHAIN` (for showing it, not continuing it)."""
        found: list[StoredResponse] = []
        next_id: str | None = response_id
        while next_id is not None:
            if len(found) >= MAX_CHAIN:
                if not whole:
                    break
                raise InvalidRequest(
                    f"the conversation is longer than {MAX_CHAIN} responses", param="previous_response_id"
                )
            try:
                row = self.get(tenant_id, next_id)
            except NotFound:
                if found and not whole:
                    break
                if next_id == response_id:
                    raise NotFound(
                        f"no response with id '{response_id}'", code="not_found", param="previous_response_id"
                    ) from None
                raise NotFound(
                    f"response '{response_id}' continues '{next_id}', which is no longer stored",
                    code="not_found",
                    param="previous_response_id",
                ) from None
            found.append(row)
            next_id = row.previous_response_id
        return found[::-1]

    def conversation_of(self, tenant_id: str, request_id: str) -> Conversation | None:
        """The conversation of the stored response a request answered, for the console: the turns up to it
        (oldest first, as far as they are still stored) and the responses that continued it."""
        with Session(self._db) as s:
            row = s.exec(
                select(StoredResponse).where(
                    StoredResponse.request_id == request_id, StoredResponse.tenant_id == tenant_id
                )
            ).first()
            if row is None:
                return None
            later = s.exec(
                select(StoredResponse)
                .where(StoredResponse.previous_response_id == row.id, StoredResponse.tenant_id == tenant_id)
                .order_by(col(StoredResponse.created_at))
            ).all()
        try:
            turns = self.chain(tenant_id, row.id, whole=False)
        except NotFound:
            return None  # past its retention, not yet swept
        return Conversation(turns, row.id, list(later))

    def in_conversation(self, tenant_id: str, conversation_id: str, limit: int = 200) -> list[StoredResponse]:
        """The stored responses that answered in a named conversation, oldest first (for the console)."""
        with Session(self._db) as s:
            return list(
                s.exec(
                    select(StoredResponse)
                    .where(StoredResponse.conversation_id == conversation_id, StoredResponse.tenant_id == tenant_id)
                    .order_by(col(StoredResponse.created_at))
                    .limit(limit)
                ).all()
            )

    def input_items(
        self, tenant_id: str, response_id: str, *, after: str | None = None, limit: int = 20, order: str = "desc"
    ) -> Page:
        """One page of a response's input items: `limit` of them after the item `after`, in `order`."""
        if not 1 <= limit <= PAGE_MAX:
            raise InvalidRequest(f"limit must lie in [1, {PAGE_MAX}]", param="limit")
        if order not in ("asc", "desc"):
            raise InvalidRequest("order must be 'asc' or 'desc'", param="order")
        items = list(self.get(tenant_id, response_id).input_items)
        if order == "desc":
            items.reverse()
        if after is not None:
            ids = [item.get("id") for item in items]
            if after not in ids:
                raise InvalidRequest(f"no input item with id '{after}' in this response", param="after")
            items = items[ids.index(after) + 1 :]
        return Page(items[:limit], len(items) > limit)

    def delete(self, tenant_id: str, response_id: str) -> None:
        row = self.get(tenant_id, response_id)
        self._delete([row.id])

    def sweep(self, batch: int = 500) -> int:
        """Deletes stored responses past their retention, `batch` at a time; returns how many went."""
        deleted = 0
        while True:
            with Session(self._db) as s:
                expired = s.exec(
                    select(StoredResponse.id).where(col(StoredResponse.expires_at) <= self._clock()).limit(batch)
                ).all()
            if not expired:
                return deleted
            self._delete(list(expired))
            deleted += len(expired)

    def _delete(self, ids: list[str]) -> None:
        with Session(self._db) as s:
            used = set(
                s.exec(select(StoredResponseMedia.sha256).where(col(StoredResponseMedia.response_id).in_(ids))).all()
            )
            s.exec(delete(StoredResponseMedia).where(col(StoredResponseMedia.response_id).in_(ids)))  # type: ignore[call-overload]
            s.exec(delete(StoredResponse).where(col(StoredResponse.id).in_(ids)))  # type: ignore[call-overload]
            s.commit()
            still = media_in_use(s, used)
        for sha256 in used - still:
            self.blobs.delete(sha256)
