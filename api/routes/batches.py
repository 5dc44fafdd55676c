"""POST, GET /v1/batches; GET /v1/batches/{id}; POST /v1/batches/{id}/cancel: a tenant's batches."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody

from api.auth import tenant_of
from api.batches import submit
from api.batches.protocol import BatchCreate, BatchList, BatchObject
from api.openapi import answer, errors
from jobs.runner import JobRunner
from serving.errors import NotFound
from storage.batches import BatchStore
from storage.files import FileStore
from tenancy.directory import Principal

WHAT = "batches"


def _stores(batches: BatchStore | None, jobs: JobRunner | None) -> tuple[BatchStore, JobRunner]:
    if batches is None or jobs is None:
        raise NotFound("this server runs no batches", param="batch_id")
    return batches, jobs


@post(
    "/v1/batches",
    status_code=200,
    responses={**answer(BatchObject, "The batch, validating."), **errors(400, 401, 404, 429)},
)
async def create_batch(
    data: JSONBody[BatchCreate],
    principal: NamedDependency[Principal],
    batches: NamedDependency[BatchStore | None],
    jobs: NamedDependency[JobRunner | None],
    files: NamedDependency[FileStore | None],
) -> dict[str, Any]:
    store, runner = _stores(batches, jobs)
    tenant = tenant_of(principal, WHAT)
    if files is None:
        raise NotFound("this server keeps no files", param="input_file_id")
    return await submit.submit_batch(
        store,
        runner,
        files,
        tenant_id=tenant,
        key_id=principal.key_id,
        input_file_id=data.input_file_id,
        endpoint=data.endpoint,
        completion_window=data.completion_window,
        metadata=data.metadata,
    )


@get("/v1/batches/{batch_id:str}", responses={**answer(BatchObject, "The batch."), **errors(400, 401, 404, 429)})
async def retrieve_batch(
    batch_id: FromPath[str],
    principal: NamedDependency[Principal],
    batches: NamedDependency[BatchStore | None],
    jobs: NamedDependency[JobRunner | None],
) -> dict[str, Any]:
    store, _ = _stores(batches, jobs)
    return dict((await asyncio.to_thread(store.get, tenant_of(principal, WHAT), batch_id)).body)


@get("/v1/batches", responses={**answer(BatchList, "A page of the tenant's batches."), **errors(400, 401, 429)})
async def list_batches(
    principal: NamedDependency[Principal],
    batches: NamedDependency[BatchStore | None],
    jobs: NamedDependency[JobRunner | None],
    after: FromQuery[str | None] = None,
    limit: FromQuery[int] = 20,
) -> dict[str, Any]:
    store, _ = _stores(batches, jobs)
    data, more = await asyncio.to_thread(store.page, tenant_of(principal, WHAT), after=after, limit=limit)
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    return {"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": more}


@post(
    "/v1/batches/{batch_id:str}/cancel",
    status_code=200,
    responses={**answer(BatchObject, "The batch, cancelling or cancelled."), **errors(400, 401, 404, 429)},
)
async def cancel_batch(
    batch_id: FromPath[str],
    principal: NamedDependency[Principal],
    batches: NamedDependency[BatchStore | None],
    jobs: NamedDependency[JobRunner | None],
) -> dict[str, Any]:
    store, runner = _stores(batches, jobs)
    return await submit.cancel_batch(store, runner, tenant_of(principal, WHAT), batch_id)
