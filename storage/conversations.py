"""Named conversations: per tenant, in the database every gateway replica shares, their media in the blob store.

A conversation is its metadata and an ordered list of items (messages, function calls and their outputs), each
stored as the API shows it but with media parts holding a content-hash reference (`media.sha256`) into the blob
store. Items are appended in whole batches: `append` takes the conversation's row lock (PostgreSQL) or the
database's write lock (SQLite) before it reads the next place, so two responses appending at once each land
whole, one after the other, in the order their appends committed, and neither is lost. Another tenant's id is not
found, never forbidden. A conversation lives its tenant's retention past its last change; `sweep` deletes the
ones past it, and media no stored response or conversation uses go with them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, update
from sqlmodel import Session, col, delete, select

from db.models import ConversationItem, ConversationMedia, StoredConversation, aware, utcnow
from serving.errors import InvalidRequest, NotFound
from storage.blobs import BlobStore
from storage.responses import PAGE_MAX, Page, media_in_use, media_of

CONVERSATION_PREFIX = "conv_"
MAX_ITEMS = 2000  # items one conversation may hold; a response replays all of them


@dataclass(frozen=True)
class Appended:
    """Items to append: as stored (media by reference), with the bytes of every medium they reference."""

    items: list[dict[str, Any]]
    media: dict[str, bytes]


class ConversationStore:
    def __init__(self, db: Engine, blobs: BlobStore, clock: Callable[[], datetime] = utcnow) -> None:
        self._db = db
        self.blobs = blobs
        self._clock = clock

    def create(
        self, tenant_id: str, metadata: dict[str, str], first: Appended, *, retention_days: int
    ) -> StoredConversation:
        now = self._clock()
        row = StoredConversation(
            id=CONVERSATION_PREFIX + uuid.uuid4().hex,
            tenant_id=tenant_id,
            meta=metadata,
            created_at=now,
            updated_at=now,
            expires_at=now + timedelta(days=retention_days),
        )
        with Session(self._db) as s:
            s.add(row)
            s.commit()
            s.refresh(row)
        if first.items:
            self.append(tenant_id, row.id, first, retention_days=retention_days)
            return self.get(tenant_id, row.id)
        return row

    def get(self, tenant_id: str, conversation_id: str) -> StoredConversation:
        with Session(self._db) as s:
            row = s.get(StoredConversation, conversation_id)
        if row is None or row.tenant_id != tenant_id or aware(row.expires_at) <= self._clock():
            raise NotFound(f"no conversation with id '{conversation_id}'", code="not_found", param="conversation_id")
        return row

    def update(self, tenant_id: str, conversation_id: str, metadata: dict[str, str]) -> StoredConversation:
        self.get(tenant_id, conversation_id)
        with Session(self._db) as s:
            row = s.get(StoredConversation, conversation_id, with_for_update=True)
            assert row is not None
            row.meta = metadata
            row.updated_at = self._clock()
            s.add(row)
            s.commit()
            s.refresh(row)
        return row

    def delete(self, tenant_id: str, conversation_id: str) -> None:
        self.get(tenant_id, conversation_id)
        self._delete([conversation_id])

    def append(
        self, tenant_id: str, conversation_id: str, batch: Appended, *, retention_days: int
    ) -> list[dict[str, Any]]:
        """Appends the items, in order and together, after every item already there; returns them with their ids
        (an item's own `id` is kept unless the conversation holds it already; a fresh one is given otherwise)."""
        self.get(tenant_id, conversation_id)
        for sha256, data in batch.media.items():  # the bytes first, so no stored row ever names a missing blob
            if self.blobs.put(data) != sha256:
                raise ValueError(f"media bytes do not match their digest {sha256}")
        now = self._clock()
        with Session(self._db) as s:
            # The counter moves first: on PostgreSQL the UPDATE locks the row, on SQLite it takes the write lock,
            # so a concurrent append waits here until this one commits and then reads the moved counter.
            s.exec(
                update(StoredConversation)  # type: ignore[call-overload]
                .where(col(StoredConversation.id) == conversation_id)
                .values(
                    next_seq=StoredConversation.next_seq + len(batch.items),
                    updated_at=now,
                    expires_at=now + timedelta(days=retention_days),
                )
            )
            row = s.get(StoredConversation, conversation_id, populate_existing=True)
            assert row is not None
            start = row.next_seq - len(batch.items)
            if row.next_seq > MAX_ITEMS:
                raise InvalidRequest(
                    f"a conversation holds at most {MAX_ITEMS} items; start another", param="conversation"
                )
            taken = set(
                s.exec(
                    select(ConversationItem.id).where(
                        col(ConversationItem.conversation_id) == conversation_id,
                        col(ConversationItem.id).in_([i["id"] for i in batch.items if i.get("id")]),
                    )
                ).all()
            )
            kept = []
            for offset, given in enumerate(batch.items):
                unique = given.get("id") and given["id"] not in taken
                item = given if unique else {**given, "id": _fresh_id(given)}
                taken.add(item["id"])
                kept.append(item)
                s.add(
                    ConversationItem(
                        conversation_id=conversation_id, id=item["id"], seq=start + offset, item=item, created_at=now
                    )
                )
                for sha256 in sorted(media_of([item])):
                    s.add(ConversationMedia(conversation_id=conversation_id, item_id=item["id"], sha256=sha256))
            s.commit()
        return kept

    def items(
        self,
        tenant_id: str,
        conversation_id: str,
        *,
        after: str | None = None,
        limit: int = 20,
        order: str = "desc",
    ) -> Page:
        """One page of the conversation's items: `limit` of them after the item `after`, in `order`."""
        if not 1 <= limit <= PAGE_MAX:
            raise InvalidRequest(f"limit must lie in [1, {PAGE_MAX}]", param="limit")
        if order not in ("asc", "desc"):
            raise InvalidRequest("order must be 'asc' or 'desc'", param="order")
        self.get(tenant_id, conversation_id)
        with Session(self._db) as s:
            query = select(ConversationItem).where(col(ConversationItem.conversation_id) == conversation_id)
            if after is not None:
                mark = s.get(ConversationItem, (conversation_id, after))
                if mark is None:
                    raise InvalidRequest(f"no item with id '{after}' in this conversation", param="after")
                seq = col(ConversationItem.seq)
                query = query.where(seq > mark.seq if order == "asc" else seq < mark.seq)
            by = col(ConversationItem.seq)
            rows = s.exec(query.order_by(by.asc() if order == "asc" else by.desc()).limit(limit + 1)).all()
        return Page([r.item for r in rows[:limit]], len(rows) > limit)

    def all_items(self, tenant_id: str, conversation_id: str) -> list[dict[str, Any]]:
        """Every item of the conversation, oldest first (what a response in it replays)."""
        self.get(tenant_id, conversation_id)
        with Session(self._db) as s:
            rows = s.exec(
                select(ConversationItem)
                .where(col(ConversationItem.conversation_id) == conversation_id)
                .order_by(col(ConversationItem.seq))
            ).all()
        return [r.item for r in rows]

    def item(self, tenant_id: str, conversation_id: str, item_id: str) -> dict[str, Any]:
        self.get(tenant_id, conversation_id)
        with Session(self._db) as s:
            row = s.get(ConversationItem, (conversation_id, item_id))
        if row is None:
            raise NotFound(f"no item with id '{item_id}' in this conversation", code="not_found", param="item_id")
        return dict(row.item)

    def delete_item(self, tenant_id: str, conversation_id: str, item_id: str) -> None:
        self.item(tenant_id, conversation_id, item_id)
        with Session(self._db) as s:
            conversation = col(ConversationMedia.conversation_id) == conversation_id
            of_item = col(ConversationMedia.item_id) == item_id
            used = set(s.exec(select(ConversationMedia.sha256).where(conversation, of_item)).all())
            s.exec(delete(ConversationMedia).where(conversation, of_item))  # type: ignore[call-overload]
            s.exec(
                delete(ConversationItem).where(  # type: ignore[call-overload]
                    col(ConversationItem.conversation_id) == conversation_id, col(ConversationItem.id) == item_id
                )
            )
            s.exec(
                update(StoredConversation)  # type: ignore[call-overload]
                .where(col(StoredConversation.id) == conversation_id)
                .values(updated_at=self._clock())
            )
            s.commit()
            unused = used - media_in_use(s, used)
        for sha256 in unused:
            self.blobs.delete(sha256)

    def sweep(self, batch: int = 200) -> int:
        """Deletes conversations past their retention, `batch` at a time; returns how many went."""
        deleted = 0
        while True:
            with Session(self._db) as s:
                expired = s.exec(
                    select(StoredConversation.id)
                    .where(col(StoredConversation.expires_at) <= self._clock())
                    .limit(batch)
                ).all()
            if not expired:
                return deleted
            self._delete(list(expired))
            deleted += len(expired)

    def _delete(self, ids: list[str]) -> None:
        with Session(self._db) as s:
            mine = col(ConversationMedia.conversation_id).in_(ids)
            used = set(s.exec(select(ConversationMedia.sha256).where(mine)).all())
            s.exec(delete(ConversationMedia).where(mine))  # type: ignore[call-overload]
            s.exec(delete(ConversationItem).where(col(ConversationItem.conversation_id).in_(ids)))  # type: ignore[call-overload]
            s.exec(delete(StoredConversation).where(col(StoredConversation.id).in_(ids)))  # type: ignore[call-overload]
            s.commit()
            unused = used - media_in_use(s, used)
        for sha256 in unused:
            self.blobs.delete(sha256)


def conversation_object(row: StoredConversation) -> dict[str, Any]:
    """A conversation as the API shows it."""
    created = int(aware(row.created_at).timestamp())
    return {"id": row.id, "object": "conversation", "created_at": created, "metadata": dict(row.meta or {})}


_ITEM_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


def _fresh_id(item: dict[str, Any]) -> str:
    return f"{_ITEM_PREFIX.get(str(item.get('type') or 'message'), 'item')}_{uuid.uuid4().hex}"
