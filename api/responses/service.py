"""`POST /v1/responses` on the same lease as chat completions: the request becomes chat turns and one
`GenerationRequest` (api.responses.parsing), serving admits it under the caller's policy and its grounding
guardrail (serving.gate), and the completion renders as one `response` object or typed SSE events
(api.responses.rendering). Under `flag` the verdict rides on the response as `grounding` (on `response.completed`
when streamed); under `block` a failed whole answer is regenerated once, then refused as a `refusal` part."""

from __future__ import annotations

from typing import Any

from litestar import Response
from litestar.response import Stream

from api.responses.parsing import generation_request, to_conversation
from api.responses.protocol import ResponsesRequest
from api.responses.rendering import complete_body, headers, refusal, stream
from grounding.guardrail import REFUSAL
from serving.completion import Completion
from serving.errors import TesseraError
from serving.service import InferenceService
from tenancy.directory import Principal
from tenancy.quotas import QuotaGate


async def create_response(
    req: ResponsesRequest,
    principal: Principal,
    service: InferenceService,
    quotas: QuotaGate,
    *,
    default_max_tokens: int,
) -> Response[Any] | Stream:
    """A request `parse_responses_request` has read (the route's body DTO runs it): start it and render it."""
    conversation = to_conversation(req)
    request = generation_request(req, conversation, default_max_tokens)
    policy = quotas.policy(principal)
    try:
        if req.stream:
            completion = await service.start(request, policy)
            return await stream(req, completion, conversation.param, service.stream_verdict(policy, completion))

        async def render(completion: Completion) -> dict[str, Any]:
            return await complete_body(req, completion)

        answer = await service.answer(request, policy, render)
    except TesseraError as exc:
        exc.param = conversation.param(exc.param)
        raise
    body = refusal(answer.body, REFUSAL) if answer.refused else answer.body
    if (verdict := answer.grounding()) is not None:
        body["grounding"] = verdict
    return Response(body, headers=headers(answer.completion))
