"""Builds chat completion responses: one JSON body, or an SSE stream that ends in `[DONE]`."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from litestar import Response
from litestar.response import Stream

from api.chat_serving import ChatService, Generation, finish_reason, response_extras
from api.errors import to_api_error
from api.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChunkChoice,
    Delta,
    ResponseMessage,
)
from serving.engine import EngineDelta

logger = logging.getLogger(__name__)

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def _sse(payload: dict[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n"


def _without_none(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    for key in keys:
        if data.get(key) is None:
            data.pop(key, None)
    return data


async def complete(chat: ChatService, req: ChatCompletionRequest, gen: Generation) -> Response[dict[str, Any]]:
    text: list[str] = []
    async for delta in chat.run(gen):
        text.append(delta.text)
    choice = Choice(
        message=ResponseMessage(content="".join(text)),
        finish_reason=finish_reason(gen.finish_reason),
        token_ids=list(gen.token_ids) if req.return_token_ids else None,
    )
    body = ChatCompletion(
        id=gen.request_id,
        created=gen.created,
        model=gen.pool.name,
        choices=[choice],
        usage=gen.usage(),
        **response_extras(req, gen),
    )
    data = body.model_dump(mode="json")
    data["choices"] = [_without_none(c, ("token_ids",)) for c in data["choices"]]
    return Response(
        _without_none(data, ("prompt_token_ids", "system_fingerprint", "degraded")), headers=gen.timing_headers()
    )


class EventStream(Stream):
    """An SSE response that keeps its `text/event-stream` type: Litestar otherwise lets the route's default
    media type (JSON) win over the response's own."""

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["media_type"] = self.media_type
        return super().to_asgi_response(*args, **kwargs)


async def stream(chat: ChatService, req: ChatCompletionRequest, gen: Generation) -> Stream:
    """Start the engine first, so errors before any token still get a proper HTTP status."""
    deltas = chat.run(gen)
    try:
        first = await anext(deltas)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await deltas.aclose()
        raise
    return EventStream(
        _events(req, gen, first, deltas),
        media_type="text/event-stream",
        headers={**SSE_HEADERS, **gen.timing_headers()},
    )


async def _events(
    req: ChatCompletionRequest, gen: Generation, first: EngineDelta | None, deltas: AsyncGenerator[EngineDelta, None]
) -> AsyncIterator[str]:
    include_usage = bool(req.stream_options and req.stream_options.include_usage)

    def chunk(
        delta: Delta, reason: str | None = None, token_ids: list[int] | None = None, first_chunk: bool = False
    ) -> str:
        body = ChatCompletionChunk(
            id=gen.request_id,
            created=gen.created,
            model=gen.pool.name,
            choices=[
                ChunkChoice(delta=delta, finish_reason=reason, token_ids=token_ids if req.return_token_ids else None)
            ],
            **(response_extras(req, gen) if first_chunk else {}),
        ).model_dump(mode="json")
        body["choices"] = [_without_none(c, ("token_ids",)) for c in body["choices"]]
        if not include_usage:
            body.pop("usage")
        return _sse(_without_none(body, ("prompt_token_ids", "degraded")))

    try:
        yield chunk(Delta(role="assistant", content=""), first_chunk=True)
        pending = [first] if first is not None else []
        while True:
            delta = pending.pop() if pending else await anext(deltas, None)
            if delta is None:
                break
            reason = finish_reason(delta.finish_reason)
            if delta.text or delta.token_ids or reason:
                yield chunk(Delta(content=delta.text), reason, delta.token_ids)
        if include_usage:
            yield _sse(
                {
                    "id": gen.request_id,
                    "object": "chat.completion.chunk",
                    "created": gen.created,
                    "model": gen.pool.name,
                    "choices": [],
                    "usage": gen.usage().model_dump(mode="json"),
                }
            )
    except Exception as exc:
        err = to_api_error(exc)
        logger.warning("stream %s failed after it started: %s", gen.request_id, err.message)
        yield _sse(err.body())
    finally:
        await deltas.aclose()
    yield _sse("[DONE]")
