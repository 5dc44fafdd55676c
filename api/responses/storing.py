"""Stored responses and conversations on the wire: whether a request is stored, the history a
`previous_response_id` or a `conversation` replays, and a finished response with its input items and media handed
to the stores (storage.responses, storage.conversations).

A stored input item is the item as the client sent it, with an `id`; each media part keeps a content-hash reference
(`media.sha256`) to its bytes, taken from what the request path already fetched or decoded (a URL is never fetched
again), and the URL it came by when that was not a data URL. Replaying history gives every earlier input item back
(media as data URLs of the stored bytes: the same content, so the same embedding-cache entries) and every earlier
output item as input, then the new input; earlier turns' `instructions` are not carried over.
"""

from __future__ import annotations

import base64
import hashlib
import re
import uuid
from collections.abc import Callable
from typing import Any

from api.auth import tenant_of
from api.responses.protocol import InputItem, ResponsesRequest
from serving.completion import Completion
from serving.errors import InternalFailure, InvalidRequest, NotFound
from storage.blobs import BlobMissing, BlobStore
from storage.conversations import Appended, ConversationStore
from storage.responses import ResponseStore
from tenancy.directory import Principal

DEFAULT_RETENTION_DAYS = 30
_MEDIA_PARAM = re.compile(r"input\[(\d+)\]\.content\[(\d+)\]")
_ITEM_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}
_IMAGE_MAGIC = ((b"\x89PNG", "image/png"), (b"\xff\xd8", "image/jpeg"), (b"GIF8", "image/gif"), (b"RIFF", "image/webp"))


def stores(req: ResponsesRequest, principal: Principal) -> bool:
    """Whether this response is stored: `store` as sent, else the tenant's setting. A tenant with storage off
    cannot ask for it, nor name a conversation; a conversation is one history, so it is never named beside a
    `previous_response_id`."""
    if req.conversation_id is not None and req.previous_response_id is not None:
        raise InvalidRequest(
            "`conversation` and `previous_response_id` cannot be used together: a conversation holds its own "
            "history; name one or the other",
            param="conversation",
            code="mutually_exclusive_parameters",
        )
    if principal.tenant_id is None:  # an operator's key without a tenant: nobody to keep the response for
        if req.store or req.previous_response_id is not None or req.conversation_id is not None:
            raise InvalidRequest("stored responses belong to a tenant; this key has none", param="store")
        return False
    allowed = principal.quota.store_responses if principal.quota is not None else True
    if req.conversation_id is not None and not allowed:
        raise InvalidRequest(
            "this tenant keeps no conversations (its `store_responses` setting is off)",
            param="conversation",
            code="storage_disabled",
        )
    if req.store and not allowed:
        raise InvalidRequest(
            "this tenant does not store responses (its `store_responses` setting is off); send `store: false`",
            param="store",
            code="storage_disabled",
        )
    return allowed if req.store is None else bool(req.store)


def retention_days(principal: Principal) -> int:
    return principal.quota.response_retention_days if principal.quota is not None else DEFAULT_RETENTION_DAYS


def earlier_turns(store: ResponseStore, principal: Principal, response_id: str) -> list[InputItem]:
    """The items of the conversation that ends at `response_id`: each turn's input items, then its output."""
    items: list[InputItem] = []
    for row in store.chain(tenant_of(principal, "stored responses"), response_id):
        items += [InputItem.model_validate(replayed(store.blobs, item)) for item in row.input_items]
        items += [InputItem.model_validate(_as_input(item)) for item in row.body.get("output", [])]
    return items


def conversation_turns(conversations: ConversationStore, principal: Principal, conversation_id: str) -> list[InputItem]:
    """Every item of a named conversation, oldest first, as input items (a response's output as assistant turns)."""
    try:
        items = conversations.all_items(tenant_of(principal, "conversations"), conversation_id)
    except NotFound as exc:
        exc.param = "conversation"
        raise
    return [InputItem.model_validate(_as_input(replayed(conversations.blobs, item, "conversation"))) for item in items]


def keep(
    principal: Principal,
    req: ResponsesRequest,
    body: dict[str, Any],
    completion: Completion,
    earlier: int,
    where: Callable[[str | None], str | None],
    *,
    store: ResponseStore | None,
    conversations: ConversationStore | None,
) -> None:
    """Keeps a finished response to `req` (the client's own request): appended to its conversation, when it names
    one, as its input items then its output; and stored, when `store` is given. Serving saw the history replayed
    `earlier` items ahead of the request's input, so its own items start there; `where` maps serving's name of a
    medium's place (`messages[1].content[0].image_url.url`) to the input's (`input[0].content[0]...`)."""
    media = _media_by_item(completion, earlier, where)
    items: list[dict[str, Any]] = []
    blobs: dict[str, bytes] = {}
    for i, item in enumerate(own_items(req)):
        data = item.model_dump(mode="json", exclude_none=True)
        items.append(stored_item(data, media.get(i, {}), blobs))
    conversation_id = req.conversation_id
    if conversation_id is not None and conversations is not None:
        outputs = [dict(item) for item in body.get("output", [])]
        added = conversations.append(
            tenant_of(principal, "conversations"),
            conversation_id,
            Appended([as_item(item) for item in items] + outputs, blobs),
            retention_days=retention_days(principal),
        )
        items = [{**item, "id": kept["id"]} for item, kept in zip(items, added, strict=False)]  # ids as given there
    if store is not None:
        store.save(
            tenant_id=tenant_of(principal, "stored responses"),
            body=body,
            input_items=items,
            media=blobs,
            request_id=completion.request_id,
            retention_days=retention_days(principal),
            previous_response_id=req.previous_response_id,
            conversation_id=conversation_id,
        )


def as_item(item: dict[str, Any]) -> dict[str, Any]:
    """A stored input item as a conversation shows it: a message's content as a list of parts (a string is one
    `input_text` part, or `output_text` in an assistant's turn), and the message `completed`."""
    kind = item.get("type") or "message"
    if kind != "message":
        return {**item, "type": kind}
    content = item.get("content")
    if isinstance(content, str):
        part = "output_text" if item.get("role") == "assistant" else "input_text"
        content = [{"type": part, "text": content, **({"annotations": []} if part == "output_text" else {})}]
    return {**item, "type": "message", "status": item.get("status") or "completed", "content": content}


def listed(blobs: BlobStore, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored items as the API lists them: media back as their URLs, or data URLs of their bytes."""
    return [replayed(blobs, item) for item in items]


def own_items(req: ResponsesRequest) -> list[InputItem]:
    """The request's input as items (a string input is one user message)."""
    if isinstance(req.input, list):
        return list(req.input)
    text = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": req.input}]}
    return [InputItem.model_validate(text)]


def _media_by_item(
    completion: Completion, earlier: int, where: Callable[[str | None], str | None]
) -> dict[int, dict[int, bytes]]:
    """The request's media bytes by (own item index, content index), from the params serving kept them under."""
    found: dict[int, dict[int, bytes]] = {}
    for param, raw in completion.submission.media:
        at = _MEDIA_PARAM.match(where(param) or "")
        if at is not None and int(at[1]) >= earlier:
            found.setdefault(int(at[1]) - earlier, {})[int(at[2])] = raw
    return found


def stored_item(
    item: dict[str, Any], media: dict[int, bytes], blobs: dict[str, bytes], *, keep_urls: bool = False
) -> dict[str, Any]:
    """An input item as stored: with an `id`, and each medium's bytes (`media` by content index, else the part's
    own data URL or base64 audio) put in `blobs` and named by their sha256. With `keep_urls`, an image given by a
    URL whose bytes nobody fetched is kept as that URL, and fetched when it is replayed."""
    kind = item.get("type") or "message"
    out = {"id": item.get("id") or f"{_ITEM_PREFIX.get(kind, 'item')}_{uuid.uuid4().hex}", **item, "type": kind}
    content = item.get("content")
    if isinstance(content, list):
        out["content"] = [_stored_part(part, media.get(j), blobs, keep_urls) for j, part in enumerate(content)]
    return out


def _stored_part(part: dict[str, Any], raw: bytes | None, blobs: dict[str, bytes], keep_urls: bool) -> dict[str, Any]:
    kind = part.get("type")
    if kind not in ("input_image", "input_audio"):
        return part
    url = str(part.get("image_url") or "")
    if raw is None and keep_urls and kind == "input_image" and not url.startswith("data:"):
        return part
    raw = raw if raw is not None else _inline_bytes(part)
    sha256 = hashlib.sha256(raw).hexdigest()
    blobs[sha256] = raw
    if kind == "input_audio":
        audio = part.get("input_audio") or {}
        kept_audio = {"format": audio.get("format", "wav")}
        return {"type": "input_audio", "input_audio": kept_audio, "media": {"sha256": sha256}}
    kept = {"sha256": sha256, "mime": _image_mime(url, raw)}
    return {**part, "image_url": None if url.startswith("data:") else url, "media": kept}


def _inline_bytes(part: dict[str, Any]) -> bytes:
    """A medium's bytes from the part itself, where it carries them (a data URL, base64 audio): the fallback when
    serving kept none for it. A URL's bytes are only ever taken from what serving fetched."""
    inline = (part.get("input_audio") or {}).get("data") if part.get("type") == "input_audio" else None
    url = str(part.get("image_url") or "")
    if inline is None and url.startswith("data:") and "," in url:
        inline = url.split(",", 1)[1]
    if inline is None:
        raise InternalFailure("the bytes of a fetched medium were not kept; the response was not stored")
    try:
        return base64.b64decode(inline, validate=True)
    except ValueError as exc:
        raise InvalidRequest(f"a medium's base64 data does not decode: {exc}", code="invalid_value") from exc


def _image_mime(url: str, raw: bytes) -> str:
    if url.startswith("data:image/"):
        return url[5:].split(";", 1)[0]
    return next((mime for magic, mime in _IMAGE_MAGIC if raw.startswith(magic)), "image/png")


def replayed(blobs: BlobStore, item: dict[str, Any], param: str = "previous_response_id") -> dict[str, Any]:
    """A stored input item with its media parts' bytes back in the item (data URLs, base64 audio); a medium no
    longer stored is a 400 naming `param`."""
    content = item.get("content")
    if not isinstance(content, list):
        return item
    return {**item, "content": [_replayed_part(blobs, part, param) for part in content]}


def _replayed_part(blobs: BlobStore, part: dict[str, Any], param: str) -> dict[str, Any]:
    media = part.get("media")
    if not isinstance(media, dict):
        return part
    try:
        raw = blobs.get(str(media["sha256"]))
    except BlobMissing as exc:
        raise InvalidRequest(
            f"a stored medium of this conversation is gone ({exc}); start the conversation again",
            param=param,
            code="stored_media_missing",
        ) from exc
    data = base64.b64encode(raw).decode()
    rest = {k: v for k, v in part.items() if k != "media"}
    if part.get("type") == "input_audio":
        return {**rest, "input_audio": {**(part.get("input_audio") or {}), "data": data}}
    return {**rest, "image_url": f"data:{media.get('mime', 'image/png')};base64,{data}"}


def _as_input(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as the input item of a later turn (an assistant message, a function call)."""
    if item.get("type") == "message" and item.get("role") == "assistant":
        return {"type": "message", "role": "assistant", "content": item.get("content", []), "id": item.get("id")}
    return {k: v for k, v in item.items() if k != "status"}
