"""Server-sent events every streaming endpoint shares: the headers, a `data:` line, a response that keeps its
`text/event-stream` type, and the events of a completion iterated inside its lease."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from litestar.response import Stream

from api.errors import ApiError, to_api_error
from serving.completion import Completion
from serving.engines.base import EngineDelta

logger = logging.getLogger(__name__)


SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def sse(payload: dict[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n"


class EventStream(Stream):
    """An SSE response that keeps its `text/event-stream` type: Litestar otherwise lets the route's default
    media type (JSON) win over the response's own."""

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["media_type"] = self.media_type
        return super().to_asgi_response(*args, **kwargs)


async def lease_events(
    completion: Completion,
    opening: list[str],
    first: EngineDelta | None,
    render: Callable[[EngineDelta | None], list[str]],
    failed: Callable[[ApiError], list[str]],
) -> AsyncIterator[str]:
    """The events of a streamed completion, iterated inside its lease: whatever ends the stream (the last delta,
    the client going away, an error) releases the lease. An error after the stream started becomes the
    events `failed` renders; the caller adds what follows a successful end."""
    async with completion:
        try:
            for event in opening + render(first):
                yield event
            async for delta in completion:
                for event in render(delta):
                    yield event
        except Exception as exc:
            err = to_api_error(exc)
            logger.warning("stream %s failed after it started: %s", completion.request_id, err.message)
            for event in failed(err):
                yield event
