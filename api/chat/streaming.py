"""A `Completion` as an SSE stream of OpenAI chat completion chunks that ends in `[DONE]`.

Each of the `n` choices opens with its role, streams content (or tool-call pieces, and logprobs when asked)
and closes with its finish reason; a usage chunk follows when the client asked for it. An error after the
stream started becomes an error event, then `[DONE]`. `[DONE]` is sent only once the request's usage is on
record; when it cannot be recorded, the stream ends with a `metering_unavailable` error event instead.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from litestar.response import Stream

from api.chat.protocol import (
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChunkChoice,
    Delta,
    DeltaFunction,
    DeltaToolCall,
)
from api.chat.rendering import extras, finish_reason, response_headers, wire_logprobs, wire_usage
from api.errors import ApiError, to_api_error
from api.sse import SSE_HEADERS, EventStream, lease_events, sse
from serving.completion import Completion
from serving.engines.base import EngineDelta
from serving.errors import Unavailable
from serving.gate import VerdictSource
from serving.tools import DecodedDelta, OutputDecoder

logger = logging.getLogger(__name__)


async def stream(req: ChatCompletionRequest, completion: Completion, verdict: VerdictSource | None = None) -> Stream:
    """Wait for the engine's first delta before answering, so errors before any token still get an HTTP status.
    With `verdict` (the grounding guardrail's), the stream's last chunk carries it as `grounding`: the deltas go
    out as they come, and only the end waits for the score."""
    first = await completion.first_delta()
    return EventStream(
        _events(req, completion, first, verdict),
        media_type="text/event-stream",
        headers={**SSE_HEADERS, **response_headers(completion)},
    )


class _Chunks:
    """Builds the chunks of one stream."""

    def __init__(self, req: ChatCompletionRequest, completion: Completion) -> None:
        self.req = req
        self.completion = completion
        self.include_usage = bool(req.stream_options and req.stream_options.include_usage)
        self.decoders: list[OutputDecoder] = [completion.decoder() for _ in completion.choices]

    def chunk(self, index: int, delta: Delta, **choice: Any) -> str:
        c = self.completion
        body = ChatCompletionChunk(
            id=c.request_id,
            created=c.submission.created,
            model=c.model,
            choices=[ChunkChoice(index=index, delta=delta, **choice)],
            **(extras(self.req, c) if "role" in delta.model_fields_set else {}),
        ).model_dump(mode="json")
        if not self.include_usage:
            body.pop("usage")
        return sse(body)

    def opening(self) -> list[str]:
        return [self.chunk(i, Delta(role="assistant", content="")) for i in range(len(self.decoders))]

    def events(self, delta: EngineDelta | None) -> list[str]:
        if delta is None:
            return []
        decoder = self.decoders[delta.index]
        decoded = decoder.feed(delta)
        out = []
        logprobs = wire_logprobs(delta.logprobs) if self.req.logprobs else None
        token_ids = delta.token_ids if self.req.return_token_ids else None
        if decoded.content or decoded.tool_calls or logprobs is not None or token_ids:
            out.append(self.chunk(delta.index, _delta(decoded), logprobs=logprobs, token_ids=token_ids))
        if delta.finish_reason is not None:
            final = decoder.finish()
            reason = finish_reason(delta.finish_reason, decoder)
            out.append(self.chunk(delta.index, _delta(final, closing=True), finish_reason=reason))
        return out

    def closing(self, grounding: dict[str, Any] | None) -> str | None:
        """The chunk after the choices: usage when asked for, and the guardrail's verdict when there is one."""
        if not self.include_usage and grounding is None:
            return None
        c = self.completion
        body: dict[str, Any] = {
            "id": c.request_id,
            "object": "chat.completion.chunk",
            "created": c.submission.created,
            "model": c.model,
            "choices": [],
        }
        if self.include_usage:
            body["usage"] = wire_usage(c.usage()).model_dump(mode="json")
        if grounding is not None:
            body["grounding"] = grounding
        return sse(body)


def _delta(decoded: DecodedDelta, closing: bool = False) -> Delta:
    calls = [
        DeltaToolCall(
            index=p.index,
            id=p.id,
            type="function" if p.id else None,
            function=DeltaFunction(name=p.name, arguments=p.arguments if (p.arguments or p.id) else None),
        )
        for p in decoded.tool_calls
    ]
    content = decoded.content if decoded.content is not None or calls else ("" if not closing else None)
    return Delta(content=content, tool_calls=calls or None)


async def _events(
    req: ChatCompletionRequest, completion: Completion, first: EngineDelta | None, verdict: VerdictSource | None
) -> AsyncIterator[str]:
    chunks = _Chunks(req, completion)
    ended = False

    def failed(err: ApiError) -> list[str]:
        nonlocal ended
        ended = True
        return [sse(err.body())]

    async for event in lease_events(completion, chunks.opening(), first, chunks.events, failed):
        yield event
    try:
        await completion.require_recorded()
    except Unavailable as exc:
        if not ended:
            yield sse(to_api_error(exc).body())
        return  # no `[DONE]`: it would say the usage is on record
    if not ended and (closing := chunks.closing(await verdict() if verdict is not None else None)):
        yield closing  # `[DONE]` means the request's usage is on record
    yield sse("[DONE]")
