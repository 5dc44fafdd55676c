"""`POST /v1/responses` on the same lease as chat completions: the request becomes chat turns and one
`GenerationRequest` (api.responses.parsing), serving admits it under the caller's policy and its grounding
guardrail (serving.gate), and the completion renders as one `response` object or typed SSE events
(api.responses.rendering). Under `flag` the verdict rides on the response as `grounding` (on `response.completed`
when streamed); under `block` a failed whole answer is regenerated once, then refused as a `refusal` part."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from litestar import Response
from litestar.response import Stream

from api.responses.parsing import Conversation, generation_request, to_conversation
from api.responses.protocol import ResponsesRequest
from api.responses.rendering import complete_body, headers, refusal, stream
from api.responses.storing import earlier_turns, own_items, save, stores
from grounding.guardrail import REFUSAL
from serving.completion import Completion
from serving.errors import InvalidRequest, TesseraError
from serving.service import InferenceService
from storage.responses import ResponseStore
from tenancy.directory import Principal
from tenancy.quotas import QuotaGate

_INPUT_ITEM = re.compile(r"input\[(\d+)\]")


async def create_response(
    req: ResponsesRequest,
    principal: Principal,
    service: InferenceService,
    quotas: QuotaGate,
    store: ResponseStore | None,
    *,
    default_max_tokens: int,
) -> Response[Any] | Stream:
    """A request `parse_responses_request` has read (the route's body DTO runs it): continue its conversation,
    start it, render it, and keep it when it is stored."""
    stored = store is not None and stores(req, principal)
    req = req.model_copy(update={"store": stored})
    earlier = []
    if req.previous_response_id is not None:
        if store is None:
            raise InvalidRequest("this server keeps no responses", param="previous_response_id")
        earlier = earlier_turns(store, principal, req.previous_response_id)
    full = req.model_copy(update={"input": [*earlier, *own_items(req)]}) if earlier else req
    conversation = to_conversation(full)
    request = generation_request(full, conversation, default_max_tokens)
    policy = quotas.policy(principal)

    async def keep(body: dict[str, Any], completion: Completion) -> None:
        if stored and store is not None:
            await asyncio.to_thread(save, store, principal, req, body, completion, len(earlier))

    try:
        if req.stream:
            completion = await service.start(request, policy)
            awaited = service.stream_verdict(policy, completion)
            return await stream(req, completion, _param(conversation, len(earlier)), awaited, keep)

        async def render(completion: Completion) -> dict[str, Any]:
            return await complete_body(req, completion)

        answer = await service.answer(request, policy, render)
    except TesseraError as exc:
        exc.param = _param(conversation, len(earlier))(exc.param)
        raise
    body = refusal(answer.body, REFUSAL) if answer.refused else answer.body
    if (verdict := answer.grounding()) is not None:
        body["grounding"] = verdict
    await keep(body, answer.completion)
    return Response(body, headers=headers(answer.completion))


def _param(conversation: Conversation, earlier: int) -> Callable[[str | None], str | None]:
    """Maps serving's `param` to the client's request, whose input starts after the `earlier` replayed items."""

    def param(found: str | None) -> str | None:
        mapped = conversation.param(found)
        at = _INPUT_ITEM.match(mapped or "")
        if at is None or not earlier:
            return mapped
        index = int(at[1]) - earlier
        return "previous_response_id" if index < 0 else f"input[{index}]{mapped[at.end() :]}"  # type: ignore[index]

    return param
