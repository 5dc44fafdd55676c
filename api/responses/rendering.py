"""A `Completion` as OpenAI's `response` object: one JSON body, or typed SSE events (`event:` and `data:` lines,
each payload with its `type` and `sequence_number`) from `response.created` to `response.completed` or
`response.incomplete`. An error after the stream started becomes an `error` event, and the stream ends.

Rendering iterates the completion only inside `async with`, so however the response ends the lease releases
what it holds. Output items open and close one at a time, in output order, as the decoder's pieces arrive.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from litestar import Response
from litestar.response import Stream

from api.chat.rendering import modality_counts, response_headers
from api.errors import ApiError, to_api_error
from api.responses.protocol import (
    FunctionCallItem,
    IncompleteDetails,
    InputTokensDetails,
    ItemStatus,
    OutputItem,
    OutputMessage,
    OutputRefusal,
    OutputText,
    ResponseObject,
    ResponsesRequest,
    ResponseUsage,
)
from api.sse import SSE_HEADERS, EventStream, lease_events
from serving.completion import Completion
from serving.engines.base import EngineDelta
from serving.errors import Unavailable
from serving.gate import VerdictSource
from serving.record import TokenUsage
from serving.tools import DecodedDelta, OutputDecoder, ToolCallDelta

logger = logging.getLogger(__name__)

LEASE_PREFIX, RESPONSE_PREFIX = "chatcmpl-", "resp_"
ParamMap = Callable[[str | None], str | None]


def response_id(request_id: str) -> str:
    """`resp_<hex>` for the lease `chatcmpl-<hex>`: the same hex, so either names the other."""
    return RESPONSE_PREFIX + request_id.removeprefix(LEASE_PREFIX)


def lease_id(response: str) -> str:
    """The request id of the lease (and of its usage row, `GET /v1/usage/{id}`) that answered `response`."""
    return LEASE_PREFIX + response.removeprefix(RESPONSE_PREFIX)


def headers(completion: Completion) -> dict[str, str]:
    return {**response_headers(completion), "x-tessera-request-id": completion.request_id}


def wire_usage(usage: TokenUsage) -> ResponseUsage:
    details = InputTokensDetails(**modality_counts(usage))
    return ResponseUsage(
        input_tokens=usage.prompt,
        input_tokens_details=details,
        output_tokens=usage.completion,
        total_tokens=usage.total,
    )


def _echoed(req: ResponsesRequest) -> dict[str, Any]:
    """The request's parameters as every response object echoes them."""
    choice = req.tool_choice or "auto"
    text = req.text.model_dump(mode="json", by_alias=True) if req.text else {"format": {"type": "text"}}
    return {
        "instructions": req.instructions,
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "prompt_cache_key": req.prompt_cache_key,
        "safety_identifier": req.safety_identifier,
        "text": {**text, "verbosity": text.get("verbosity") or "medium"},
        "tool_choice": choice if isinstance(choice, str) else choice.model_dump(mode="json"),
        "tools": [t.model_dump(mode="json") for t in req.tools or []],
        "user": req.user,
        "metadata": req.metadata or {},
        "store": bool(req.store),
        "previous_response_id": req.previous_response_id,
        "conversation": {"id": req.conversation_id} if req.conversation_id is not None else None,
    }


def skeleton(req: ResponsesRequest, completion: Completion) -> ResponseObject:
    """The response as it starts: in progress, no output yet, and the request's parameters echoed."""
    s = completion.submission
    params = s.engine_request.params
    degraded = None
    if s.degraded:
        reason = "the encoder pool was unavailable; answered without that media"
        degraded = {"dropped_modalities": list(s.degraded), "reason": reason}
    return ResponseObject(
        id=response_id(completion.request_id),
        created_at=s.created,
        status="in_progress",
        max_output_tokens=params.max_tokens,
        model=completion.model,
        temperature=params.temperature,
        top_p=params.top_p,
        degraded=degraded,
        **_echoed(req),
    )


def finished(response: ResponseObject, completion: Completion, output: list[OutputItem]) -> ResponseObject:
    cut = completion.finish_reason == "length"
    return response.model_copy(
        update={
            "status": "incomplete" if cut else "completed",
            "incomplete_details": IncompleteDetails(reason="max_output_tokens") if cut else None,
            "output": output,
            "usage": wire_usage(completion.usage()),
        }
    )


def queued_body(req: ResponsesRequest, response_id: str) -> dict[str, Any]:
    """A background response as it is queued: no output yet, the request's parameters echoed."""
    queued = ResponseObject(
        id=response_id,
        created_at=int(time.time()),
        status="queued",
        background=True,
        max_output_tokens=req.max_output_tokens,
        model=req.model,
        temperature=req.temperature if req.temperature is not None else 1.0,
        top_p=req.top_p if req.top_p is not None else 1.0,
        **_echoed(req.model_copy(update={"store": True})),
    )
    return _dump(queued)


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _dump(model: Any) -> dict[str, Any]:
    return dict(model.model_dump(mode="json"))


# -- one body -----------------------------------------------------------------------------------------------------


async def complete(req: ResponsesRequest, completion: Completion) -> Response[dict[str, Any]]:
    return Response(await complete_body(req, completion), headers=headers(completion))


async def complete_body(req: ResponsesRequest, completion: Completion) -> dict[str, Any]:
    """The whole answer as a `response` object, once its usage is on record."""
    decoder = completion.decoder()
    async with completion:
        async for delta in completion:
            if delta.index == 0:
                decoder.feed(delta)
    await completion.require_recorded()  # the response goes out once its usage is on record, else a 503
    decoder.finish()
    status: ItemStatus = "incomplete" if completion.finish_reason == "length" else "completed"
    output: list[OutputItem] = []
    content = decoder.content()
    if content or not decoder.calls:
        output.append(OutputMessage(id=_item_id("msg"), status="completed", content=[OutputText(text=content or "")]))
    output.extend(
        FunctionCallItem(id=_item_id("fc"), status="completed", arguments=c.arguments, call_id=c.id, name=c.name)
        for c in decoder.calls
    )
    output[-1].status = status
    return _dump(finished(skeleton(req, completion), completion, output))


def refusal(body: dict[str, Any], text: str) -> dict[str, Any]:
    """The answer withheld: one assistant message whose only content is a refusal (OpenAI's `refusal` part)."""
    message = OutputMessage(id=_item_id("msg"), status="completed", content=[OutputRefusal(refusal=text)])
    return {**body, "status": "completed", "incomplete_details": None, "output": [_dump(message)]}


# -- SSE events ---------------------------------------------------------------------------------------------------


Finished = Callable[[dict[str, Any], Completion], Awaitable[None]]


async def stream(
    req: ResponsesRequest,
    completion: Completion,
    param: ParamMap,
    verdict: VerdictSource | None = None,
    finished: Finished | None = None,
) -> Stream:
    """Wait for the engine's first delta before answering, so errors before any token still get an HTTP status.
    With `verdict` (the grounding guardrail's), `response.completed` carries it as `grounding`: the deltas go out
    as they come, and only the end waits for the score. `finished` (storing the response) runs on the final
    response before `response.completed` goes out, so a client that continues it at once finds it."""
    first = await completion.first_delta()
    events = _Events(skeleton(req, completion), completion.decoder())
    return EventStream(
        _events(events, completion, first, param, verdict, finished),
        media_type="text/event-stream",
        headers={**SSE_HEADERS, **headers(completion)},
    )


async def _events(
    events: _Events,
    completion: Completion,
    first: EngineDelta | None,
    param: ParamMap,
    verdict: VerdictSource | None,
    finished: Finished | None,
) -> AsyncIterator[str]:
    opening = [
        events.event("response.created", response=_dump(events.response)),
        events.event("response.in_progress", response=_dump(events.response)),
    ]
    ended = False

    def failed(err: ApiError) -> list[str]:
        nonlocal ended
        ended = True
        return [events.event("error", code=err.code, message=err.message, param=param(err.param))]

    async for event in lease_events(completion, opening, first, lambda d: list(events.feed(d)), failed):
        yield event
    if ended:
        return
    try:
        await completion.require_recorded()  # `response.completed` means the request's usage is on record
    except Unavailable as exc:
        for event in failed(to_api_error(exc)):
            yield event
        return
    grounding = await verdict() if verdict is not None else None
    closing = list(events.finish(completion, grounding))
    if finished is not None and events.final is not None:
        try:
            await finished(events.final, completion)
        except Exception as exc:
            logger.exception("response %s could not be stored", events.final["id"])
            for event in failed(to_api_error(Unavailable(f"the response could not be stored: {exc}"))):
                yield event
            return
    for event in closing:
        yield event


class _Events:
    """The numbered events of one streamed response, and the output items they have built."""

    def __init__(self, response: ResponseObject, decoder: OutputDecoder) -> None:
        self.response = response
        self.decoder = decoder
        self.sequence = 0
        self.items: list[OutputItem] = []  # closed, in output order
        self.open: OutputItem | None = None
        self.open_call = -1  # the decoder's index of the open function call
        self.streamed_calls = 0
        self.final: dict[str, Any] | None = None  # the finished response, once `finish` made it

    def event(self, kind: str, **fields: Any) -> str:
        payload = {"type": kind, **fields, "sequence_number": self.sequence}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n"

    def feed(self, delta: EngineDelta | None) -> Iterator[str]:
        if delta is None or delta.index != 0:
            return
        yield from self._decoded(self.decoder.feed(delta))
        if delta.finish_reason is not None:
            yield from self._decoded(self.decoder.finish())
            for call in self.decoder.calls[self.streamed_calls :]:  # calls the streaming parser did not show
                yield from self._call(ToolCallDelta(self.open_call + 1, call.id, call.name, call.arguments))

    def finish(self, completion: Completion, grounding: dict[str, Any] | None = None) -> Iterator[str]:
        status: ItemStatus = "incomplete" if completion.finish_reason == "length" else "completed"
        if self.open is None and not self.items:
            yield from self._text("")
        yield from self._close(status)
        done = finished(self.response, completion, self.items)
        self.final = _dump(done) | ({"grounding": grounding} if grounding is not None else {})
        yield self.event(f"response.{done.status}", response=self.final)

    def _decoded(self, decoded: DecodedDelta) -> Iterator[str]:
        if decoded.content:
            yield from self._text(decoded.content)
        for piece in decoded.tool_calls:
            yield from self._call(piece)

    def _where(self, item: OutputItem) -> dict[str, Any]:
        return {"item_id": item.id, "output_index": len(self.items)}

    def _text(self, piece: str) -> Iterator[str]:
        message = self.open
        if not isinstance(message, OutputMessage):
            yield from self._close("completed")
            message = self.open = OutputMessage(id=_item_id("msg"), status="in_progress", content=[])
            yield self.event("response.output_item.added", output_index=len(self.items), item=_dump(message))
            message.content.append(OutputText(text=""))
            part = _dump(message.content[0])
            yield self.event("response.content_part.added", **self._where(message), content_index=0, part=part)
        if piece:
            streamed = message.content[0]
            assert isinstance(streamed, OutputText)  # a streamed message holds one text part
            streamed.text += piece
            yield self.event(
                "response.output_text.delta", **self._where(message), content_index=0, delta=piece, logprobs=[]
            )

    def _call(self, piece: ToolCallDelta) -> Iterator[str]:
        call = self.open
        if not isinstance(call, FunctionCallItem) or piece.index != self.open_call:
            yield from self._close("completed")
            call_id, name = piece.id or _item_id("call"), piece.name or ""
            call = self.open = FunctionCallItem(
                id=_item_id("fc"), status="in_progress", arguments="", call_id=call_id, name=name
            )
            self.open_call, self.streamed_calls = piece.index, self.streamed_calls + 1
            yield self.event("response.output_item.added", output_index=len(self.items), item=_dump(call))
        if piece.name and not call.name:
            call.name = piece.name
        if piece.arguments:
            call.arguments += piece.arguments
            yield self.event("response.function_call_arguments.delta", **self._where(call), delta=piece.arguments)

    def _close(self, status: ItemStatus) -> Iterator[str]:
        item, self.open = self.open, None
        if item is None:
            return
        where = self._where(item)
        if isinstance(item, OutputMessage):
            part = item.content[0]
            text = part.text if isinstance(part, OutputText) else ""
            yield self.event("response.output_text.done", **where, content_index=0, text=text, logprobs=[])
            yield self.event("response.content_part.done", **where, content_index=0, part=_dump(item.content[0]))
        else:
            yield self.event("response.function_call_arguments.done", **where, arguments=item.arguments)
        item.status = status
        yield self.event("response.output_item.done", output_index=len(self.items), item=_dump(item))
        self.items.append(item)
