"""POST /v1/responses."""

from __future__ import annotations

from typing import Any

from litestar import Response, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.response import Stream

from api.openapi import PRECHECK, ParsedBody, StreamingOperation, answer, errors
from api.responses.parsing import parse_responses_request
from api.responses.protocol import ResponseObject, ResponsesRequest
from api.responses.service import create_response as respond
from config.settings import Settings
from serving.service import InferenceService
from tenancy.directory import Principal
from tenancy.quotas import QuotaGate


class ResponsesBody(ParsedBody[ResponsesRequest]):
    parse = staticmethod(parse_responses_request)


@post(
    "/v1/responses",
    status_code=200,
    dto=ResponsesBody,
    before_request=ResponsesBody.parse_large_off_loop,
    return_dto=None,
    operation_class=StreamingOperation,
    opt={PRECHECK: True},
    responses={
        **answer(ResponseObject, "The response; with `stream: true`, typed `response.*` events instead."),
        **errors(400, 401, 403, 404, 413, 429, 503),
    },
)
async def create_response(
    data: JSONBody[ResponsesRequest],
    principal: NamedDependency[Principal],
    service: NamedDependency[InferenceService],
    quotas: NamedDependency[QuotaGate],
    settings: NamedDependency[Settings],
) -> Response[Any] | Stream:
    return await respond(data, principal, service, quotas, default_max_tokens=settings.default_max_tokens)
