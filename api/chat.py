"""The chat endpoint's one path, shared by `/v1/chat/completions` and the console's playground: parse the body,
start a completion under the caller's policy, render it. Neither caller can salt, limit or meter differently."""

from __future__ import annotations

from typing import Any

from litestar import Response
from litestar.response import Stream

from api.parsing import generation_request, parse_chat_request
from api.protocol import ChatCompletionRequest
from api.rendering import complete
from api.streaming import stream
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
    completion = await service.start(generation_request(req, default_max_tokens), quotas.policy(principal))
    return await (stream(req, completion) if req.stream else complete(req, completion))
