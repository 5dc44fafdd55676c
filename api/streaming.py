"""Renders a `Completion` as OpenAI's chat completion: one JSON body, or an SSE stream that ends in `[DONE]`.

The completion is the lease: rendering only iterates it inside `async with`, so however the response ends
(finished, client gone, error mid-stream) the lease releases what it holds.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from litestar import Response
from litestar.response import Stream

from api.errors import to_api_error
from api.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChunkChoice,
    Delta,
    PromptTokensDetails,
    ResponseMessage,
    Usage,
)
from serving.completion import Completion
from serving.engine import EngineDelta
from serving.record import TokenUsage

logger = logging.getLogger(__name__)

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def wire_usage(usage: TokenUsage) -> Usage:
    details = PromptTokensDetails(
        cached_tokens=usage.cached,
        text_tokens=usage.text,
        image_tokens=usage.image,
        audio_tokens=usage.audio,
        cached_image_tokens=usage.cached_image,
        cached_audio_tokens=usage.cached_audio,
    )
    return Usage(
        prompt_tokens=usage.prompt,
        completion_tokens=usage.completion,
        total_tokens=usage.total,
        prompt_tokens_details=details,
    )


def finish_reason(reason: str | None) -> str | None:
    """vLLM's reasons mapped onto OpenAI's vocabulary: an aborted or repetition-stopped request stopped."""
    return "stop" if reason in ("abort", "repetition") else reason


def response_headers(completion: Completion) -> dict[str, str]:
    """Where the time went before the response started, which pool answered and why, and the caller's limits."""
    s = completion.submission
    headers = {
        "x-tessera-model": s.pool.name,
        "x-tessera-route": s.route_reason,
        "x-tessera-pre-engine-ms": str(int((s.submitted - s.started) * 1000)),
    }
    if completion.first_token_at is not None:
        headers["x-tessera-engine-ttft-ms"] = str(int((completion.first_token_at - s.submitted) * 1000))
    return {**headers, **s.limits}


def _extras(req: ChatCompletionRequest, completion: Completion) -> dict[str, Any]:
    extras: dict[str, Any] = {}
    if req.return_token_ids:
        extras["prompt_token_ids"] = completion.prompt_token_ids
    if completion.submission.degraded:
        extras["degraded"] = {
            "dropped_modalities": list(completion.submission.degraded),
            "reason": "the encoder pool was unavailable; answered without that media",
        }
    return extras


def _without_none(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    for key in keys:
        if data.get(key) is None:
            data.pop(key, None)
    return data


def _sse(payload: dict[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n"


async def complete(req: ChatCompletionRequest, completion: Completion) -> Response[dict[str, Any]]:
    async with completion:
        async for _ in completion:
            pass
    choice = Choice(
        message=ResponseMessage(content=completion.text),
        finish_reason=finish_reason(completion.finish_reason) or "stop",
        token_ids=list(completion.token_ids) if req.return_token_ids else None,
    )
    body = ChatCompletion(
        id=completion.request_id,
        created=completion.submission.created,
        model=completion.model,
        choices=[choice],
        usage=wire_usage(completion.usage()),
        **_extras(req, completion),
    )
    data = body.model_dump(mode="json")
    data["choices"] = [_without_none(c, ("token_ids",)) for c in data["choices"]]
    return Response(
        _without_none(data, ("prompt_token_ids", "system_fingerprint", "degraded")),
        headers=response_headers(completion),
    )


class EventStream(Stream):
    """An SSE response that keeps its `text/event-stream` type: Litestar otherwise lets the route's default
    media type (JSON) win over the response's own."""

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["media_type"] = self.media_type
        return super().to_asgi_response(*args, **kwargs)


async def stream(req: ChatCompletionRequest, completion: Completion) -> Stream:
    """Wait for the engine's first delta before answering, so errors before any token still get an HTTP status."""
    try:
        first = await anext(completion, None)
    except BaseException:
        await completion.aclose()
        raise
    return EventStream(
        _events(req, completion, first),
        media_type="text/event-stream",
        headers={**SSE_HEADERS, **response_headers(completion)},
    )


async def _events(req: ChatCompletionRequest, completion: Completion, first: EngineDelta | None) -> AsyncIterator[str]:
    include_usage = bool(req.stream_options and req.stream_options.include_usage)

    def chunk(
        delta: Delta, reason: str | None = None, token_ids: list[int] | None = None, opening: bool = False
    ) -> str:
        body = ChatCompletionChunk(
            id=completion.request_id,
            created=completion.submission.created,
            model=completion.model,
            choices=[
                ChunkChoice(delta=delta, finish_reason=reason, token_ids=token_ids if req.return_token_ids else None)
            ],
            **(_extras(req, completion) if opening else {}),
        ).model_dump(mode="json")
        body["choices"] = [_without_none(c, ("token_ids",)) for c in body["choices"]]
        if not include_usage:
            body.pop("usage")
        return _sse(_without_none(body, ("prompt_token_ids", "degraded")))

    def content(delta: EngineDelta | None) -> str | None:
        reason = None if delta is None else finish_reason(delta.finish_reason)
        if delta is None or not (delta.text or delta.token_ids or reason):
            return None
        return chunk(Delta(content=delta.text), reason, delta.token_ids)

    async with completion:
        try:
            yield chunk(Delta(role="assistant", content=""), opening=True)
            if (event := content(first)) is not None:
                yield event
            async for delta in completion:
                if (event := content(delta)) is not None:
                    yield event
        except Exception as exc:
            err = to_api_error(exc)
            logger.warning("stream %s failed after it started: %s", completion.request_id, err.message)
            yield _sse(err.body())
            yield _sse("[DONE]")
            return
    if include_usage:
        yield _sse(
            {
                "id": completion.request_id,
                "object": "chat.completion.chunk",
                "created": completion.submission.created,
                "model": completion.model,
                "choices": [],
                "usage": wire_usage(completion.usage()).model_dump(mode="json"),
            }
        )
    yield _sse("[DONE]")
