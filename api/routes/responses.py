"""POST /v1/responses."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, post
from litestar.response import Stream

from api.responses import create_response as respond
from api.settings import Settings
from serving.service import InferenceService
from tenancy.directory import Principal
from tenancy.quotas import QuotaGate


@post("/v1/responses", status_code=200)
async def create_response(
    request: Request[Any, Any, Any],
    principal: Principal,
    service: InferenceService,
    quotas: QuotaGate,
    settings: Settings,
) -> Response[Any] | Stream:
    body = await request.body()
    return await respond(body, principal, service, quotas, default_max_tokens=settings.default_max_tokens)
