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
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from api.errors import to_api_error
from api.responses.protocol import ResponsesRequest
from api.responses.service import answer_whole, prepare
from jobs.runner import Claimed
from serving.errors import RateLimited, TesseraError
from serving.service import InferenceService
from storage.conversations import ConversationStore
from storage.responses import ResponseStore
from tenancy.directory import Directory
from tenancy.quotas import QuotaGate

logger = logging.getLogger(__name__)

T = TypeVar("T")
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
    conversations: ConversationStore | None = None,
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

    async def attempt() -> None:
        turn = prepare(req, principal, store, conversations, default_max_tokens=default_max_tokens)
        await answer_whole(turn, service, quotas, finish=as_queued)

    try:
        await waiting_out_rate_limits(attempt, what=f"background response {response_id}")
    except TesseraError as exc:
        await _failed(store, tenant, response_id, exc)


async def waiting_out_rate_limits(attempt: Callable[[], Awaitable[T]], *, what: str) -> T:
    """`attempt()`, tried again after the tenant's `retry-after` while it is refused for the tenant's rate limit,
    up to `RATE_LIMIT_TRIES` times: background work waits for its turn instead of failing."""
    for tries in range(1, RATE_LIMIT_TRIES + 1):
        try:
            return await attempt()
        except RateLimited as exc:
            if tries == RATE_LIMIT_TRIES:
                raise
            wait = min(RATE_LIMIT_WAIT_MAX_S, float(exc.retry_after_s or 1.0))
            logger.info("%s waits %.1f s for its tenant's rate limit", what, wait)
            await asyncio.sleep(wait)
    raise AssertionError("unreachable")


async def _failed(store: ResponseStore, tenant: str, response_id: str, exc: Exception) -> None:
    err = to_api_error(exc)
    await asyncio.to_thread(store.set_status, tenant, response_id, "failed", {"code": err.code, "message": err.message})
