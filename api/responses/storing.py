"""Stored responses on the wire: whether a request is stored, the conversation a `previous_response_id` continues,
and a finished response with its input items and media handed to the store (storage.responses).

A stored input item is the item as the client sent it, with an `id`; each media part keeps a content-hash reference
(`media.sha256`) to its bytes, taken from what the request path already fetched or decoded (a URL is never fetched
again), and the URL it came by when that was not a data URL. Continuing a conversation replays every earlier turn's
input items (media as data URLs of the stored bytes: the same content, so the same embedding-cache entries) and
output items, then the new input; earlier turns' `instructions` are not carried over.
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
from serving.errors import InternalFailure, InvalidRequest
from storage.blobs import BlobMissing
from storage.responses import ResponseStore
from tenancy.directory import Principal

DEFAULT_RETENTION_DAYS = 30
_MEDIA_PARAM = re.compile(r"input\[(\d+)\]\.content\[(\d+)\]")
_ITEM_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}
_IMAGE_MAGIC = ((b"\x89PNG", "image/png"), (b"\xff\xd8", "image/jpeg"), (b"GIF8", "image/gif"), (b"RIFF", "image/webp"))


def stores(req: ResponsesRequest, principal: Principal) -> bool:
    """Whether this response is stored: `store` as sent, else the tenant's setting. A tenant with storage off
    cannot ask for it."""
    if principal.tenant_id is None:  # an operator's key without a tenant: nobody to keep the response for
        if req.store or req.previous_response_id is not None:
            raise InvalidRequest("stored responses belong to a tenant; this key has none", param="store")
        return False
    allowed = principal.quota.store_responses if principal.quota is not None else True
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
        items += [InputItem.model_validate(_replayed(store, item)) for item in row.input_items]
        items += [InputItem.model_validate(_as_input(item)) for item in row.body.get("output", [])]
    return items


def save(
    store: ResponseStore,
    principal: Principal,
    req: ResponsesRequest,
    body: dict[str, Any],
    completion: Completion,
    earlier: int,
    where: Callable[[str | None], str | None],
) -> None:
    """Keeps a finished response to `req` (the client's own request): the conversation it continued replayed
    `earlier` items ahead of its input, so its own items start there in what serving saw; `where` maps serving's
    name of a medium's place (`messages[1].content[0].image_url.url`) to the input's (`input[0].content[0]...`)."""
    media = _media_by_item(completion, earlier, where)
    items: list[dict[str, Any]] = []
    blobs: dict[str, bytes] = {}
    for i, item in enumerate(own_items(req)):
        data = item.model_dump(mode="json", exclude_none=True)
        items.append(_stored_item(data, media.get(i, {}), blobs))
    store.save(
        tenant_id=tenant_of(principal, "stored responses"),
        body=body,
        input_items=items,
        media=blobs,
        request_id=completion.request_id,
        retention_days=retention_days(principal),
        previous_response_id=req.previous_response_id,
    )


def listed(store: ResponseStore, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored input items as the API lists them: media back as their URLs, or data URLs of their bytes."""
    return [_replayed(store, item) for item in items]


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


def _stored_item(item: dict[str, Any], media: dict[int, bytes], blobs: dict[str, bytes]) -> dict[str, Any]:
    kind = item.get("type") or "message"
    out = {"id": item.get("id") or f"{_ITEM_PREFIX.get(kind, 'item')}_{uuid.uuid4().hex}", **item, "type": kind}
    content = item.get("content")
    if isinstance(content, list):
        out["content"] = [_stored_part(part, media.get(j), blobs) for j, part in enumerate(content)]
    return out


def _stored_part(part: dict[str, Any], raw: bytes | None, blobs: dict[str, bytes]) -> dict[str, Any]:
    kind = part.get("type")
    if kind not in ("input_image", "input_audio"):
        return part
    raw = raw if raw is not None else _inline_bytes(part)
    sha256 = hashlib.sha256(raw).hexdigest()
    blobs[sha256] = raw
    if kind == "input_audio":
        audio = part.get("input_audio") or {}
        kept_audio = {"format": audio.get("format", "wav")}
        return {"type": "input_audio", "input_audio": kept_audio, "media": {"sha256": sha256}}
    url = str(part.get("image_url") or "")
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
    return base64.b64decode(inline)


def _image_mime(url: str, raw: bytes) -> str:
    if url.startswith("data:image/"):
        return url[5:].split(";", 1)[0]
    return next((mime for magic, mime in _IMAGE_MAGIC if raw.startswith(magic)), "image/png")


def _replayed(store: ResponseStore, item: dict[str, Any]) -> dict[str, Any]:
    """A stored input item with its media parts' bytes back in the item (data URLs, base64 audio)."""
    content = item.get("content")
    if not isinstance(content, list):
        return item
    return {**item, "content": [_replayed_part(store, part) for part in content]}


def _replayed_part(store: ResponseStore, part: dict[str, Any]) -> dict[str, Any]:
    media = part.get("media")
    if not isinstance(media, dict):
        return part
    try:
        raw = store.blobs.get(str(media["sha256"]))
    except BlobMissing as exc:
        raise InvalidRequest(
            f"a stored medium of this conversation is gone ({exc}); start the conversation again",
            param="previous_response_id",
            code="stored_media_missing",
        ) from exc
    data = base64.b64encode(raw).decode()
    rest = {k: v for k, v in part.items() if k != "media"}
    if part.get("type") == "input_audio":
        return {**rest, "input_audio": {**(part.get("input_audio") or {}), "data": data}}
    return {**rest, "image_url": f"data:{media.get('mime', 'image/png')};base64,{data}"}


def _as_input(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as the input item of a later turn (an assistant message, a function call)."""
    if item.get("type") == "message":
        return {"type": "message", "role": "assistant", "content": item.get("content", []), "id": item.get("id")}
    return {k: v for k, v in item.items() if k != "status"}
