"""POST /v1/embeddings."""

from __future__ import annotations

from typing import Any

from litestar import Response, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from api.embeddings.protocol import EmbeddingRequest, EmbeddingResponse
from api.embeddings.service import create_embeddings, parse_embedding_request
from api.openapi import PRECHECK, ParsedBody, answer, errors
from config.settings import Settings
from serving.task_lease import TaskService
from tenancy.directory import Principal
from tenancy.quotas import QuotaGate


class EmbeddingBody(ParsedBody[EmbeddingRequest]):
    parse = staticmethod(parse_embedding_request)


@post(
    "/v1/embeddings",
    status_code=200,
    dto=EmbeddingBody,
    before_request=EmbeddingBody.parse_large_off_loop,
    return_dto=None,
    opt={PRECHECK: True},
    responses={**answer(EmbeddingResponse, "One embedding per input."), **errors(400, 401, 403, 404, 413, 429, 503)},
)
async def create_embedding(
    data: JSONBody[EmbeddingRequest],
    principal: NamedDependency[Principal],
    task_service: NamedDependency[TaskService],
    quotas: NamedDependency[QuotaGate],
    settings: NamedDependency[Settings],
) -> Response[Any]:
    body, request_id = await create_embeddings(
        data, principal, task_service, quotas, max_inputs=settings.max_embedding_inputs
    )
    return Response(body, headers={"x-request-id": request_id})
