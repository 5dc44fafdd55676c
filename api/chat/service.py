"""The chat endpoint's one path, shared by `/v1/chat/completions` and the console's playground: parse the body,
start a completion under the caller's policy, render it. Neither caller can salt, limit or meter differently.

The tenant's grounding guardrail acts in serving (serving.gate), on every endpoint alike: this module only renders
what it decides. A whole answer carries the verdict as `grounding`, or, refused, OpenAI's refusal shape; a stream
carries the verdict on its last chunk.
"""

from __future__ import annotations

from typing import Any

from litestar import Response
from litestar.response import Stream

from api.chat.parsing import generation_request, parse_chat_request
from api.chat.protocol import ChatCompletionRequest
from api.chat.rendering import complete_body, response_headers
from api.chat.streaming import stream
from grounding.guardrail import REFUSAL
from serving.completion import Completion
from serving.service import InferenceService
from tenancy.directory import Principal
from tenancy.quotas import QuotaGate


async def chat_completion(
    body: bytes, principal: Principal, service: InferenceService, quotas: QuotaGate, *, default_max_tokens: int
) -> Response[Any] | Stream:
    req = parse_chat_request(body)
    return await answer_chat(req, principal, service, quotas, default_max_tokens=default_max_tokens)


async def answer_chat(
    req: ChatCompletionRequest,
    principal: Principal,
    service: InferenceService,
    quotas: QuotaGate,
    *,
    default_max_tokens: int,
) -> Response[Any] | Stream:
    """A request `parse_chat_request` has read (the route's body DTO runs it): start it and render it."""
    policy = quotas.policy(principal)
    request = generation_request(req, default_max_tokens)
    if req.stream:
        completion = await service.start(request, policy)
        return await stream(req, completion, service.stream_verdict(policy, completion))

    async def render(completion: Completion) -> dict[str, Any]:
        return await complete_body(req, completion)

    answer = await service.answer(request, policy, render)
    body = answer.body
    if answer.refused:
        body = _refusal(body)
    if (verdict := answer.grounding()) is not None:
        body["grounding"] = verdict
    return Response(body, headers=response_headers(answer.completion))


def _refusal(body: dict[str, Any]) -> dict[str, Any]:
    """The answer withheld: OpenAI's refusal shape, the verdict (added by the caller) saying why."""
    for choice in body["choices"]:
        choice["message"] = {**choice["message"], "content": None, "refusal": REFUSAL, "tool_calls": None}
        choice["finish_reason"] = "stop"
        choice["logprobs"] = None
    return body
