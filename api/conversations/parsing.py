"""Items a client adds to a conversation, checked and made ready to store.

An item is checked as a response in the conversation would read it (`api.responses.parsing`), so a conversation
never holds an item its next response must refuse; an error names the item's place (`items[2].content[0].type`).
As stored, a message's content is a list of parts (a string becomes one `input_text` part, or `output_text` in an
assistant's turn) and it is `completed`; media given inline (a data URL, base64 audio) go to the blob store by
content hash, and an image given by URL is kept as its URL, fetched when a response replays it.
"""

from __future__ import annotations

from typing import Any

from api.responses.parsing import check_item
from api.responses.protocol import InputItem
from api.responses.storing import as_item, stored_item
from serving.errors import InvalidRequest
from storage.conversations import Appended

# `include` values for listing items: an input image's URL is always in the item, so asking for it changes nothing.
INCLUDABLE = ("message.input_image.image_url",)


def to_stored(items: list[InputItem], where: str = "items") -> Appended:
    """The items as a conversation keeps them, with the bytes of the media they carry."""
    stored: list[dict[str, Any]] = []
    blobs: dict[str, bytes] = {}
    for i, item in enumerate(items):
        check_item(item, f"{where}[{i}]")
        data = as_item(item.model_dump(mode="json", exclude_none=True))
        try:
            stored.append(stored_item(data, {}, blobs, keep_urls=True))
        except InvalidRequest as exc:
            exc.param = f"{where}[{i}]"
            raise
    return Appended(stored, blobs)


def check_metadata(metadata: dict[str, str] | None) -> dict[str, str]:
    """At most 16 pairs, keys up to 64 characters and values up to 512, as OpenAI allows."""
    for key, value in (metadata or {}).items():
        if len(key) > 64:
            raise InvalidRequest(f"metadata key '{key[:20]}...' is longer than 64 characters", param="metadata")
        if len(value) > 512:
            raise InvalidRequest(f"metadata value of '{key}' is longer than 512 characters", param="metadata")
    return dict(metadata or {})


def check_include(include: list[str] | None) -> None:
    for value in include or []:
        if value not in INCLUDABLE:
            raise InvalidRequest(
                f"'{value}' cannot be included; conversation items include: {', '.join(INCLUDABLE)}",
                param="include",
                code="unsupported_parameter",
            )
