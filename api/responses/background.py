"""Background responses, run by the job runner (jobs.runner): the queued request answered as batch-priority work
on the same lease, under the caller's quotas and guardrail, and stored over its `queued` row.

The job carries the request and the id of the key that queued it; the key is looked up again when the job runs,
so a key revoked in the meantime runs nothing. A tenant at its rate limit waits (its `retry-after`) rather than
failing, a bounded number of times; any other refusal or failure ends the response `failed` with the error, in
OpenAI's `{code, message}` shape. A response cancelled while it runs stays cancelled whatever its answer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from api.errors import to_api_error
from api.responses.protocol import ResponsesRequest
from api.responses.service import answer_whole, prepare
from jobs.runner import Claimed
from serving.errors import RateLimited, TesseraError
from serving.service import InferenceService
from storage.responses import ResponseStore
from tenancy.directory import Directory
from tenancy.quotas import QuotaGate

logger = logging.getLogger(__name__)

RATE_LIMIT_TRIES = 20
RATE_LIMIT_WAIT_MAX_S = 30.0


async def run_background_response(
    job: Claimed,
    *,
    directory: Directory,
    quotas: QuotaGate,
    service: InferenceService,
    store: ResponseStore,
    default_max_tokens: int,
) -> None:
    response_id, tenant = str(job.payload["response_id"]), str(job.tenant_id)
    principal = await asyncio.to_thread(directory.by_key_id, str(job.payload["key_id"]))
    if principal is None or principal.tenant_id != tenant:
        revoked = {"code": "invalid_api_key", "message": "the key that queued this response no longer exists"}
        await asyncio.to_thread(store.set_status, tenant, response_id, "failed", revoked)
        return
    if not await asyncio.to_thread(store.set_status, tenant, response_id, "in_progress"):
        return  # cancelled while it was queued
    queued = (await asyncio.to_thread(store.get, tenant, response_id)).body
    req = ResponsesRequest.model_validate(job.payload["request"])
    req = req.model_copy(update={"background": False, "stream": False, "priority": "batch"})

    def as_queued(body: dict[str, Any]) -> None:
        body.update(id=response_id, background=True, created_at=queued["created_at"])

    for attempt in range(1, RATE_LIMIT_TRIES + 1):
        try:
            turn = prepare(req, principal, store, default_max_tokens=default_max_tokens)
            await answer_whole(turn, service, quotas, finish=as_queued)
            return
        except RateLimited as exc:
            if attempt == RATE_LIMIT_TRIES:
                await _failed(store, tenant, response_id, exc)
                return
            wait = min(RATE_LIMIT_WAIT_MAX_S, float(exc.retry_after_s or 1.0))
            logger.info("background response %s waits %.1f s for its tenant's rate limit", response_id, wait)
            await asyncio.sleep(wait)
        except TesseraError as exc:
            await _failed(store, tenant, response_id, exc)
            return


async def _failed(store: ResponseStore, tenant: str, response_id: str, exc: Exception) -> None:
    err = to_api_error(exc)
    await asyncio.to_thread(store.set_status, tenant, response_id, "failed", {"code": err.code, "message": err.message})
