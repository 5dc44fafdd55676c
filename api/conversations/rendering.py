"""Conversations as the API answers: the conversation object, and its items with their media back in them."""

from __future__ import annotations

from typing import Any

from api.responses.storing import listed
from db.models import StoredConversation, aware
from storage.blobs import BlobStore
from storage.responses import Page


def conversation_object(row: StoredConversation) -> dict[str, Any]:
    return {
        "id": row.id,
        "object": "conversation",
        "created_at": int(aware(row.created_at).timestamp()),
        "metadata": dict(row.meta or {}),
    }


def item_list(blobs: BlobStore, page: Page) -> dict[str, Any]:
    return {**page.wire(), "data": listed(blobs, page.data)}
