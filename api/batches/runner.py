"""Running a batch, as a job of the job runner (jobs.runner): read and check its input file, then each line through
the endpoint's own path (`answer_chat`, `create_response`) at `priority: batch`, under the policy of the key that
created the batch: admitted, encoded, cached, metered and grounded as an interactive request is. A line's result is
committed as soon as it ran, so a batch picked up again (its gateway died) goes on with the lines not yet run.

Between lines the runner looks at the batch: `cancelling` stops it, and past its completion window the lines left
are expired. Then it writes the output file (the lines that answered, with status 200) and the error file (the
rest, in OpenAI's shape) and ends the batch `completed`, `cancelled` or `expired`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any

from api.batches.reading import read_lines
from api.chat.parsing import parse_chat_request
from api.chat.service import answer_chat
from api.errors import to_api_error
from api.responses.background import waiting_out_rate_limits
from api.responses.parsing import parse_responses_request
from api.responses.service import create_response
from jobs.runner import Claimed
from serving.errors import NotFound, TesseraError
from serving.service import InferenceService
from storage.batches import BatchStore
from storage.files import FileStore
from storage.responses import ResponseStore
from tenancy.directory import Directory, Principal
from tenancy.quotas import QuotaGate

logger = logging.getLogger(__name__)


BATCH_JOB = "batch"
OUTPUT_PURPOSE = "batch_output"


async def run_batch(
    job: Claimed,
    *,
    directory: Directory,
    quotas: QuotaGate,
    service: InferenceService,
    batches: BatchStore,
    files: FileStore,
    responses: ResponseStore | None,
    default_max_tokens: int,
    file_expiry_days: int,
) -> None:
    batch_id = str(job.payload["batch_id"])
    try:
        await _run(
            batch_id, directory, quotas, service, batches, files, responses, default_max_tokens, file_expiry_days
        )
    except asyncio.CancelledError:
        raise  # the gateway is stopping: another picks the batch up where it stopped
    except Exception as exc:
        logger.exception("batch %s failed", batch_id)
        failure = {"code": "server_error", "message": f"the batch could not run: {type(exc).__name__}: {exc}"}
        await asyncio.to_thread(batches.move, batch_id, "failed", errors=_errors([failure]))
        raise


async def _run(
    batch_id: str,
    directory: Directory,
    quotas: QuotaGate,
    service: InferenceService,
    batches: BatchStore,
    files: FileStore,
    responses: ResponseStore | None,
    default_max_tokens: int,
    file_expiry_days: int,
) -> None:
    batch = await asyncio.to_thread(batches.get, None, batch_id)
    principal = await asyncio.to_thread(directory.by_key_id, batch.key_id)
    if principal is None or principal.tenant_id != batch.tenant_id:
        failure = {"code": "invalid_api_key", "message": "the key that created this batch no longer exists"}
        await asyncio.to_thread(batches.move, batch_id, "failed", errors=_errors([failure]))
        return
    if batch.status == "validating" and not await _validated(batches, files, batch_id):
        return

    async def one(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return await _run_line(batch.endpoint, body, principal, service, quotas, responses, default_max_tokens)

    stop = "completed"
    for line in await asyncio.to_thread(batches.pending, batch_id):
        current = await asyncio.to_thread(batches.get, None, batch_id)
        if current.status == "cancelling":
            stop = "cancelled"
            break
        if batches.past_window(current):
            stop = "expired"
            break
        status, body = await one(line.body)
        result = _result(line.custom_id, status, body)
        await asyncio.to_thread(batches.finish_line, batch_id, line.line, ok=status == 200, result=result)
        await asyncio.to_thread(lambda: batches.move(batch_id, request_counts=batches.counts(batch_id)))
    await _finish(batches, files, batch_id, batch.tenant_id, stop, file_expiry_days)


def _errors(data: list[dict[str, Any]]) -> dict[str, Any]:
    return {"object": "list", "data": data}


async def _validated(batches: BatchStore, files: FileStore, batch_id: str) -> bool:
    batch = await asyncio.to_thread(batches.get, None, batch_id)
    try:
        content = await asyncio.to_thread(files.content, batch.tenant_id, batch.input_file_id)
    except NotFound as exc:
        failure = {"code": "invalid_file", "message": exc.message, "param": "input_file_id", "line": None}
        await asyncio.to_thread(batches.move, batch_id, "failed", errors=_errors([failure]))
        return False
    lines, errors = read_lines(content, batch.endpoint)
    if errors:
        await asyncio.to_thread(batches.move, batch_id, "failed", errors=_errors(errors))
        return False
    await asyncio.to_thread(batches.add_lines, batch_id, lines)
    counts = {"total": len(lines), "completed": 0, "failed": 0}
    moved = await asyncio.to_thread(
        batches.move, batch_id, "in_progress", only_from="validating", request_counts=counts
    )
    return moved["status"] in ("in_progress", "cancelling")  # cancelled while validating: its lines end cancelled


async def _run_line(
    endpoint: str,
    body: dict[str, Any],
    principal: Principal,
    service: InferenceService,
    quotas: QuotaGate,
    responses: ResponseStore | None,
    default_max_tokens: int,
) -> tuple[int, dict[str, Any]]:
    """One line through its endpoint's path: its status code and response body (an error in OpenAI's shape)."""
    raw = json.dumps({**body, "stream": False, "priority": "batch"}).encode()

    async def attempt() -> Any:
        if endpoint == "/v1/responses":
            req = parse_responses_request(raw)
            return await create_response(
                req, principal, service, quotas, responses, default_max_tokens=default_max_tokens
            )
        return await answer_chat(
            parse_chat_request(raw), principal, service, quotas, default_max_tokens=default_max_tokens
        )

    try:
        answered = await waiting_out_rate_limits(attempt, what="a batch line")
    except TesseraError as exc:
        err = to_api_error(exc)
        return err.status_code, err.body()
    except Exception as exc:  # a line must not take its batch down with it
        logger.exception("a batch line failed")
        err = to_api_error(exc)
        return err.status_code, err.body()
    return int(answered.status_code or 200), dict(answered.content)


def _result(custom_id: str, status: int, body: dict[str, Any]) -> dict[str, Any]:
    """The line as the output or error file holds it (OpenAI's format)."""
    request_id = body.get("id") if status == 200 else None
    response = {"status_code": status, "request_id": request_id, "body": body}
    return {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": custom_id, "response": response, "error": None}


def _unrun(custom_id: str, stop: str) -> dict[str, Any]:
    message = {
        "cancelled": "the batch was cancelled before this request ran",
        "expired": "the batch's completion window ended before this request ran",
    }[stop]
    code = "batch_cancelled" if stop == "cancelled" else "batch_expired"
    error = {"code": code, "message": message}
    return {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": custom_id, "response": None, "error": error}


async def _finish(
    batches: BatchStore, files: FileStore, batch_id: str, tenant_id: str, stop: str, expiry_days: int
) -> None:
    """Writes the output and error files and ends the batch."""
    await asyncio.to_thread(batches.move, batch_id, "finalizing")
    output: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for line in await asyncio.to_thread(batches.lines, batch_id):
        if line.ok is None:
            failed.append(_unrun(line.custom_id, stop))
        else:
            (output if line.ok else failed).append(line.result or {})

    def write(rows: list[dict[str, Any]], name: str) -> str | None:
        if not rows:
            return None
        content = "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows).encode()
        made = files.create(tenant_id, OUTPUT_PURPOSE, f"{batch_id}_{name}.jsonl", content, expires_days=expiry_days)
        return made.id

    output_id = await asyncio.to_thread(write, output, "output")
    error_id = await asyncio.to_thread(write, failed, "error")
    counts = await asyncio.to_thread(batches.counts, batch_id)
    counts["failed"] = len(failed)
    await asyncio.to_thread(
        batches.move, batch_id, stop, output_file_id=output_id, error_file_id=error_id, request_counts=counts
    )
