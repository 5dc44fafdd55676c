"""`POST /v1/responses` on the same lease as chat completions: the request becomes chat turns and one
`GenerationRequest` (api.responses.parsing), `InferenceService.start` admits it under the caller's policy, and the
completion renders as one `response` object or typed SSE events (api.responses.rendering)."""

from __future__ import annotations

from typing import Any

from litestar import Response
from litestar.response import Stream

from api.responses.parsing import generation_request, to_conversation
from api.responses.protocol import ResponsesRequest
from api.responses.rendering import complete, stream
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
    try:
        completion = await service.start(request, quotas.policy(principal))
        return await (stream(req, completion, conversation.param) if req.stream else complete(req, completion))
    except TesseraError as exc:
        exc.param = conversation.param(exc.param)
        raise
