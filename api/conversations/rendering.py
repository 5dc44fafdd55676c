"""A conversation's items as the API answers with them: their media back in them (the conversation object itself is
storage.conversations.conversation_object)."""

from __future__ import annotations

from typing import Any

from api.responses.storing import listed
from storage.blobs import BlobStore
from storage.responses import Page


def item_list(blobs: BlobStore, page: Page) -> dict[str, Any]:
    return {**page.wire(), "data": listed(blobs, page.data)}
