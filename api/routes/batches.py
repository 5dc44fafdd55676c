"""POST, GET /v1/batches; GET /v1/batches/{id}; POST /v1/batches/{id}/cancel: a tenant's batches."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody

from api.auth import tenant_of
from api.batches.protocol import BatchCreate, BatchList, BatchObject
from api.batches.runner import BATCH_JOB
from api.openapi import answer, errors
from jobs.runner import JobRunner
from serving.errors import InvalidRequest, NotFound
from storage.batches import BatchStore
from storage.files import FileStore
from tenancy.directory import Principal

WHAT = "batches"


def _stores(batches: BatchStore | None, jobs: JobRunner | None) -> tuple[BatchStore, JobRunner]:
    if batches is None or jobs is None:
        raise NotFound("this server runs no batches", param="batch_id")
    return batches, jobs


def _job_id(batch_id: str) -> str:
    return "job_" + batch_id.removeprefix("batch_")


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
    try:
        source = await asyncio.to_thread(files.get, tenant, data.input_file_id)
    except NotFound:
        raise NotFound(f"no file with id '{data.input_file_id}'", param="input_file_id") from None
    if source.purpose != "batch":
        message = f"file '{source.id}' was uploaded for {source.purpose!r}, not 'batch'"
        raise InvalidRequest(message, param="input_file_id")
    body = await asyncio.to_thread(
        store.create,
        tenant_id=tenant,
        key_id=principal.key_id,
        endpoint=data.endpoint,
        input_file_id=source.id,
        completion_window=data.completion_window,
        metadata=data.metadata,
    )
    payload = {"batch_id": body["id"]}
    await asyncio.to_thread(runner.enqueue, BATCH_JOB, payload, tenant_id=tenant, job_id=_job_id(body["id"]))
    return body


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
    batch = await asyncio.to_thread(store.get, tenant_of(principal, WHAT), batch_id)
    if batch.status == "validating" and await asyncio.to_thread(runner.cancel, _job_id(batch_id)) == "cancelled":
        return await asyncio.to_thread(store.move, batch_id, "cancelled")  # it never started
    if batch.status in ("validating", "in_progress"):
        return await asyncio.to_thread(store.move, batch_id, "cancelling")  # its runner stops between lines
    return dict(batch.body)
