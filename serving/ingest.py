"""Turns chat messages into a prompt plan, then loads its media once, off the event loop, in client order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from serving.errors import MediaError, RequestShapeError
from serving.media.audio import AudioLoader, LoadedAudio
from serving.media.images import ImageLoader, LoadedImage

MediaKind = Literal["image", "audio"]


class MessageLike(Protocol):
    @property
    def role(self) -> str: ...

    @property
    def content(self) -> Any: ...


@dataclass(frozen=True)
class MediaItem:
    kind: MediaKind
    param: str
    url: str | None = None  # image_url.url
    data: str | None = None  # input_audio.data
    fmt: str | None = None  # input_audio.format


@dataclass
class MessagePlan:
    """Messages in the shape chat templates take, with media parts standing for items in `media`."""

    messages: list[dict[str, Any]]
    media: list[MediaItem]

    @property
    def modalities(self) -> set[str]:
        return {"text"} | {item.kind for item in self.media}

    def count(self, kind: MediaKind) -> int:
        return sum(1 for item in self.media if item.kind == kind)

    def without(self, kind: str) -> MessagePlan:
        """The plan with every `kind` part removed (a message left empty keeps an empty text part)."""
        messages = []
        for m in self.messages:
            content = m["content"]
            if isinstance(content, list):
                content = [p for p in content if p["type"] != kind] or [{"type": "text", "text": ""}]
            messages.append({**m, "content": content})
        return MessagePlan(messages, [item for item in self.media if item.kind != kind])

    def system_text(self) -> str | None:
        """The system messages' text, which a caller's requests share as their prompt prefix."""
        parts = []
        for m in self.messages:
            if m.get("role") in ("system", "developer"):
                content = m["content"]
                if isinstance(content, list):
                    parts += [str(p.get("text", "")) for p in content if p.get("type") == "text"]
                else:
                    parts.append(str(content))
        return "\n".join(parts) or None

    def opens_with_media(self) -> bool:
        """Whether a medium is the very first thing the messages carry: no system prompt, earlier turn or text
        precedes it, so what the template renders before it is the template's own."""
        if not self.messages or self.messages[0].get("role") != "user":
            return False
        content = self.messages[0]["content"]
        return isinstance(content, list) and bool(content) and content[0].get("type") in ("image", "audio")

    def user_texts(self) -> list[str]:
        """The text the user wrote, for routing by content."""
        out: list[str] = []
        for m in self.messages:
            if m["role"] != "user":
                continue
            content = m["content"]
            if isinstance(content, list):
                out.extend(p["text"] for p in content if p["type"] == "text")
            elif content:
                out.append(content)
        return out

    def last_user_text(self) -> str:
        """The text of the last user turn: the question a request asks now."""
        for m in reversed(self.messages):
            if m["role"] == "user":
                content = m["content"]
                if isinstance(content, list):
                    return " ".join(p["text"] for p in content if p["type"] == "text")
                return str(content or "")
        return ""


def plan_messages(messages: Sequence[MessageLike], *, max_images: int, max_audios: int = 1) -> MessagePlan:
    """Check the shape of every message and part; no media is decoded here."""
    out: list[dict[str, Any]] = []
    media: list[MediaItem] = []
    for i, message in enumerate(messages):
        role = "system" if message.role == "developer" else message.role
        content = message.content
        param = f"messages[{i}].content"
        turn = _tool_fields(message, i)
        if turn.get("tool_calls") and not content:
            out.append({"role": role, "content": None, **turn})  # an assistant turn that only called tools
            continue
        if content is None or (isinstance(content, list) and not content):
            raise RequestShapeError(f"message {i} ({message.role}) has no content", code="missing_content", param=param)
        if isinstance(content, str):
            out.append({"role": role, "content": content, **turn})
            continue
        parts: list[dict[str, Any]] = []
        for j, part in enumerate(content):
            parts.append(_plan_part(part, role, f"{param}[{j}]", media))
        out.append({"role": role, "content": parts, **turn})
    plan = MessagePlan(out, media)
    if plan.count("image") > max_images:
        raise RequestShapeError(
            f"the request carries {plan.count('image')} images; at most {max_images} are allowed",
            code="too_many_images",
            param="messages",
        )
    if plan.count("audio") > max_audios:
        raise RequestShapeError(
            f"the request carries {plan.count('audio')} audio clips; at most {max_audios} is allowed",
            code="too_many_audio_clips",
            param="messages",
        )
    return plan


def _tool_fields(message: MessageLike, i: int) -> dict[str, Any]:
    """An assistant turn's tool calls, or a tool turn's call id, as chat templates take them."""
    if message.role == "tool":
        call_id = getattr(message, "tool_call_id", None)
        if not call_id:
            raise RequestShapeError(
                "a tool message needs `tool_call_id`", code="missing_tool_call_id", param=f"messages[{i}].tool_call_id"
            )
        return {"tool_call_id": call_id}
    calls = getattr(message, "tool_calls", None)
    if not calls:
        return {}
    if message.role != "assistant":
        raise RequestShapeError(
            "only assistant messages carry tool_calls", code="invalid_messages", param=f"messages[{i}].tool_calls"
        )
    return {
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in calls
        ]
    }


def _plan_part(part: Any, role: str, param: str, media: list[MediaItem]) -> dict[str, Any]:
    kind = part.type
    if kind == "text":
        if part.text is None:
            raise RequestShapeError("a text part needs `text`", code="invalid_content_part", param=f"{param}.text")
        return {"type": "text", "text": part.text}
    if kind in ("image_url", "input_audio") and role != "user":
        raise RequestShapeError(
            f"{kind} parts are only accepted in user messages", code="invalid_content_part", param=f"{param}.type"
        )
    if kind == "image_url":
        if part.image_url is None:
            raise RequestShapeError(
                "an image_url part needs `image_url`", code="invalid_content_part", param=f"{param}.image_url"
            )
        media.append(MediaItem("image", f"{param}.image_url.url", url=part.image_url.url))
        return {"type": "image"}
    if kind == "input_audio":
        if part.input_audio is None:
            raise RequestShapeError(
                "an input_audio part needs `input_audio`", code="invalid_content_part", param=f"{param}.input_audio"
            )
        media.append(
            MediaItem("audio", f"{param}.input_audio", data=part.input_audio.data, fmt=part.input_audio.format)
        )
        return {"type": "audio"}
    raise RequestShapeError(
        f"unknown content part type {kind!r}; expected text, image_url or input_audio",
        code="invalid_content_part",
        param=f"{param}.type",
    )


@dataclass(frozen=True)
class ProbedMedia:
    """A medium's bytes and what its header says, before any decoding."""

    item: MediaItem
    raw: bytes
    width: int = 0
    height: int = 0
    seconds: float = 0.0


class MediaIngest:
    """Loads a plan's media on a bounded thread pool, keeping the client's order.

    `probe` reads only headers (image size, audio duration) so admission can refuse cheaply; `decode`
    then decodes each medium once.
    """

    def __init__(
        self, images: ImageLoader, audio: AudioLoader, workers: int, *, max_request_pixels: int = 64_000_000
    ) -> None:
        self._images = images
        self._audio = audio
        self._max_request_pixels = max_request_pixels
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="media")

    async def probe(self, plan: MessagePlan) -> list[ProbedMedia]:
        """Every medium's header; the request's images together must fit the decode budget, since each may
        be within the per-image limit while all of them would not fit in memory at once."""
        probed = list(await asyncio.gather(*(self._probe_item(item) for item in plan.media)))
        pixels = sum(p.width * p.height for p in probed if p.item.kind == "image")
        if pixels > self._max_request_pixels:
            raise MediaError(
                f"the request's images decode to {pixels:,} pixels together, over the limit of "
                f"{self._max_request_pixels:,}",
                code="images_too_large",
                param="messages",
            )
        return probed

    async def decode(self, probed: list[ProbedMedia]) -> list[LoadedImage | LoadedAudio]:
        return list(await asyncio.gather(*(self._decode_item(p) for p in probed)))

    async def _probe_item(self, item: MediaItem) -> ProbedMedia:
        loop = asyncio.get_running_loop()
        if item.kind == "image":
            url = item.url
            assert url is not None
            if url.startswith("data:"):  # base64 of up to tens of MB: decoded off the event loop
                raw = await loop.run_in_executor(self._pool, lambda: self._images.parse_data_url(url, param=item.param))
            else:
                raw = await self._images.load_url_bytes(url, param=item.param)
            width, height = await loop.run_in_executor(self._pool, lambda: self._images.probe(raw, param=item.param))
            return ProbedMedia(item, raw, width=width, height=height)
        assert item.data is not None
        assert item.fmt is not None
        data, fmt = item.data, item.fmt
        raw = await loop.run_in_executor(self._pool, lambda: self._audio.decode_base64(data, fmt, param=item.param))
        seconds = await loop.run_in_executor(
            self._pool, lambda: self._audio.probe(raw, fmt, param=f"{item.param}.data")
        )
        return ProbedMedia(item, raw, seconds=seconds)

    async def _decode_item(self, probed: ProbedMedia) -> LoadedImage | LoadedAudio:
        loop = asyncio.get_running_loop()
        item = probed.item
        if item.kind == "image":
            return await loop.run_in_executor(self._pool, lambda: self._images.load_bytes(probed.raw, param=item.param))
        assert item.fmt is not None
        fmt = item.fmt
        return await loop.run_in_executor(
            self._pool, lambda: self._audio.load_bytes(probed.raw, fmt, param=f"{item.param}.data")
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
