"""Submitting and cancelling a batch: what `POST /v1/batches`, its cancel and the console's Batches page share."""

from __future__ import annotations

import asyncio
from typing import Any

from api.batches.runner import BATCH_JOB
from jobs.runner import JobRunner
from serving.errors import InvalidRequest, NotFound
from storage.batches import BatchStore
from storage.files import FileStore


def job_id(batch_id: str) -> str:
    """The id of the job that runs the batch."""
    return "job_" + batch_id.removeprefix("batch_")


async def submit_batch(
    batches: BatchStore,
    jobs: JobRunner,
    files: FileStore,
    *,
    tenant_id: str,
    key_id: str,
    input_file_id: str,
    endpoint: str,
    completion_window: str,
    metadata: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Checks that the input file is the tenant's and is for `batch`, records the batch (`validating`) and queues
    its job. Returns the batch object."""
    try:
        source = await asyncio.to_thread(files.get, tenant_id, input_file_id)
    except NotFound:
        raise NotFound(f"no file with id '{input_file_id}'", param="input_file_id") from None
    if source.purpose != "batch":
        message = f"file '{source.id}' was uploaded for {source.purpose!r}, not 'batch'"
        raise InvalidRequest(message, param="input_file_id")
    body = await asyncio.to_thread(
        batches.create,
        tenant_id=tenant_id,
        key_id=key_id,
        endpoint=endpoint,
        input_file_id=source.id,
        completion_window=completion_window,
        metadata=metadata,
    )
    payload = {"batch_id": body["id"]}
    await asyncio.to_thread(jobs.enqueue, BATCH_JOB, payload, tenant_id=tenant_id, job_id=job_id(body["id"]))
    return body


async def cancel_batch(batches: BatchStore, jobs: JobRunner, tenant_id: str, batch_id: str) -> dict[str, Any]:
    """Cancels the tenant's batch: one whose job never started ends `cancelled` at once; one that runs (or waits
    between turns) goes `cancelling`, and its runner ends it at its next line. Returns the batch object."""
    batch = await asyncio.to_thread(batches.get, tenant_id, batch_id)
    never_started = batch.status == "validating" and (
        await asyncio.to_thread(jobs.cancel, job_id(batch_id), running=False) == "cancelled"
    )
    if never_started:
        return await asyncio.to_thread(batches.move, batch_id, "cancelled")
    if batch.status in ("validating", "in_progress"):
        return await asyncio.to_thread(batches.move, batch_id, "cancelling")
    return dict(batch.body)
