"""The chat endpoint's one path, shared by `/v1/chat/completions` and the console's playground: parse the body,
start a completion under the caller's policy, render it. Neither caller can salt, limit or meter differently.

The tenant's grounding guardrail (grounding.guardrail) acts here, on the rendered answer: under `flag` the
verdict rides on the response as `grounding`; under `block` a whole answer that fails is regenerated once on the
strongest pool, and a second failure becomes a refusal. Both attempts ran on an engine, so both are metered.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from litestar import Response
from litestar.response import Stream

from api.chat.parsing import generation_request, parse_chat_request
from api.chat.protocol import ChatCompletionRequest
from api.chat.rendering import complete, complete_body, response_headers
from api.chat.streaming import stream
from grounding.guardrail import REFUSAL, Verdict, decide, waits_for_verdict
from grounding.service import GroundingService
from serving.completion import Completion
from serving.policy import CallerPolicy
from serving.service import GenerationRequest, InferenceService
from tenancy.directory import Principal
from tenancy.quotas import QuotaGate


async def chat_completion(
    body: bytes,
    principal: Principal,
    service: InferenceService,
    quotas: QuotaGate,
    *,
    default_max_tokens: int,
    grounding: GroundingService | None = None,
) -> Response[Any] | Stream:
    req = parse_chat_request(body)
    return await answer_chat(
        req, principal, service, quotas, default_max_tokens=default_max_tokens, grounding=grounding
    )


async def answer_chat(
    req: ChatCompletionRequest,
    principal: Principal,
    service: InferenceService,
    quotas: QuotaGate,
    *,
    default_max_tokens: int,
    grounding: GroundingService | None = None,
) -> Response[Any] | Stream:
    """A request `parse_chat_request` has read (the route's body DTO runs it): start it and render it."""
    policy = quotas.policy(principal)
    request = generation_request(req, default_max_tokens)
    completion = await service.start(request, policy)
    guard = policy.identity.grounding_policy
    if grounding is None or not waits_for_verdict(guard) or not completion.submission.modalities - {"text"}:
        return await (stream(req, completion) if req.stream else complete(req, completion))
    grounding.prepare(completion.request_id, completion.submission.audio)
    if req.stream:

        async def verdict() -> dict[str, Any] | None:
            found = await grounding.verdict(completion.request_id)
            return found.wire() if found is not None else None

        return await stream(req, completion, verdict)
    return await _guarded(req, request, completion, service, policy, grounding)


async def _guarded(
    req: ChatCompletionRequest,
    request: GenerationRequest,
    completion: Completion,
    service: InferenceService,
    policy: CallerPolicy,
    grounding: GroundingService,
) -> Response[Any]:
    guard = policy.identity.grounding_policy
    body = await complete_body(req, completion)
    verdict = await grounding.verdict(completion.request_id)
    action = decide(guard, verdict, streamed=False, attempt=0)
    regenerated = False
    if action == "regenerate":
        strongest = service.strongest_model(completion.submission.modalities)
        if completion.model == strongest and request.params.temperature == 0:
            action = "refuse"  # greedy decoding on the same pool would only give the same answer again
        else:
            completion = await service.start(replace(request, model=strongest), policy)
            grounding.prepare(completion.request_id, completion.submission.audio)
            body = await complete_body(req, completion)
            verdict = await grounding.verdict(completion.request_id)
            action, regenerated = decide(guard, verdict, streamed=False, attempt=1), True
    if action == "refuse" and verdict is not None:
        body = _refusal(body, verdict)
    if verdict is not None:
        body["grounding"] = verdict.wire(regenerated=regenerated)
    return Response(body, headers=response_headers(completion))


def _refusal(body: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    """The answer withheld: OpenAI's refusal shape, the verdict saying why."""
    for choice in body["choices"]:
        choice["message"] = {**choice["message"], "content": None, "refusal": REFUSAL, "tool_calls": None}
        choice["finish_reason"] = "stop"
        choice["logprobs"] = None
    return body
