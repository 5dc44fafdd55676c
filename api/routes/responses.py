"""POST /v1/responses, and the stored responses: GET and DELETE /v1/responses/{id}, GET .../input_items."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Response, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody
from litestar.response import Stream

from api.auth import tenant_of
from api.openapi import PRECHECK, ParsedBody, StreamingOperation, answer, errors
from api.responses.parsing import parse_responses_request
from api.responses.protocol import DeletedResponse, InputItemList, ResponseObject, ResponsesRequest
from api.responses.service import create_response as respond
from api.responses.service import job_id
from api.responses.storing import listed
from config.settings import Settings
from jobs.runner import JobRunner
from serving.errors import InvalidRequest, NotFound
from serving.service import InferenceService
from storage.conversations import ConversationStore
from storage.responses import ResponseStore
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
    stored_responses: NamedDependency[ResponseStore | None],
    conversations: NamedDependency[ConversationStore | None],
    jobs: NamedDependency[JobRunner | None],
) -> Response[Any] | Stream:
    return await respond(
        data,
        principal,
        service,
        quotas,
        stored_responses,
        conversations,
        default_max_tokens=settings.default_max_tokens,
        jobs=jobs,
    )


def _store(stored_responses: ResponseStore | None) -> ResponseStore:
    if stored_responses is None:
        raise NotFound("this server keeps no responses", param="response_id")
    return stored_responses


@get(
    "/v1/responses/{response_id:str}",
    responses={**answer(ResponseObject, "The stored response."), **errors(400, 401, 404)},
)
async def retrieve_response(
    response_id: FromPath[str],
    principal: NamedDependency[Principal],
    stored_responses: NamedDependency[ResponseStore | None],
) -> dict[str, Any]:
    row = await asyncio.to_thread(_store(stored_responses).get, tenant_of(principal, "stored responses"), response_id)
    return dict(row.body)


@delete(
    "/v1/responses/{response_id:str}",
    status_code=200,
    responses={
        **answer(DeletedResponse, "The response and the media no other stored response uses are gone."),
        **errors(400, 401, 404),
    },
)
async def delete_response(
    response_id: FromPath[str],
    principal: NamedDependency[Principal],
    stored_responses: NamedDependency[ResponseStore | None],
) -> DeletedResponse:
    await asyncio.to_thread(_store(stored_responses).delete, tenant_of(principal, "stored responses"), response_id)
    return DeletedResponse(id=response_id)


@post(
    "/v1/responses/{response_id:str}/cancel",
    status_code=200,
    responses={
        **answer(ResponseObject, "The background response, cancelled unless it had ended."),
        **errors(400, 401, 404),
    },
)
async def cancel_response(
    response_id: FromPath[str],
    principal: NamedDependency[Principal],
    stored_responses: NamedDependency[ResponseStore | None],
    jobs: NamedDependency[JobRunner | None],
) -> dict[str, Any]:
    store, tenant = _store(stored_responses), tenant_of(principal, "stored responses")
    row = await asyncio.to_thread(store.get, tenant, response_id)
    if not row.body.get("background"):
        raise InvalidRequest("only a background response can be cancelled", param="response_id")
    if row.status in ("queued", "in_progress") and jobs is not None:
        await asyncio.to_thread(store.set_status, tenant, response_id, "cancelled")
        await asyncio.to_thread(jobs.cancel, job_id(response_id))
    return dict((await asyncio.to_thread(store.get, tenant, response_id)).body)


@get(
    "/v1/responses/{response_id:str}/input_items",
    responses={**answer(InputItemList, "One page of the response's input items."), **errors(400, 401, 404)},
)
async def list_input_items(
    response_id: FromPath[str],
    principal: NamedDependency[Principal],
    stored_responses: NamedDependency[ResponseStore | None],
    after: FromQuery[str | None] = None,
    limit: FromQuery[int] = 20,
    order: FromQuery[str] = "desc",
) -> dict[str, Any]:
    store = _store(stored_responses)
    page = await asyncio.to_thread(
        store.input_items, tenant_of(principal, "stored responses"), response_id, after=after, limit=limit, order=order
    )
    return {**page.wire(), "data": listed(store.blobs, page.data)}
