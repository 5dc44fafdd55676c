"""Running a batch, as a job of the job runner (jobs.runner): read and check its input file, then each line through
the endpoint's own path (`answer_chat`, `create_response`, `create_embeddings`) at `priority: batch`, under the
policy of the key that created the batch: admitted, encoded, cached, metered and grounded as an interactive request
is, billed at the model's batch price, counted in the tenant's monthly budgets but not in its rate limits.

Lines run in the engines' idle time: a line starts only while its pool has no interactive request waiting and the
batch share of its KV budget has room, and a gateway runs at most `concurrency` lines at once across its batches.
A batch works in turns of `turn_s` seconds, then goes back to the job queue, so another tenant's batch gets the
next turn. Each line's result is committed with its usage row in one transaction (`UsageJournal.
settle_batch_line`); a line's request id is fixed by its batch and line number, so a line whose gateway died runs
again as the same request, and a line that has a result never runs again.

Between lines the runner looks at the batch: `cancelling` stops it, past its completion window the lines left are
expired, and a line refused for the tenant's monthly budget stops it with the lines left failed as
`insufficient_quota`. Then it writes the output file (the lines that answered, with status 200) and the error file
(the rest, in OpenAI's shape) and ends the batch `completed`, `cancelled` or `expired`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from api.batches.reading import read_lines
from api.chat.parsing import parse_chat_request
from api.chat.service import answer_chat
from api.embeddings.service import create_embeddings, parse_embedding_request
from api.errors import to_api_error
from api.responses.parsing import parse_responses_request
from api.responses.service import create_response
from jobs.runner import Claimed
from serving.errors import NotFound, QuotaExceeded, RateLimited, TesseraError, Unavailable
from serving.service import InferenceService
from serving.task_lease import REQUEST_PREFIX, TaskService
from storage.batches import BatchLine, BatchStore
from storage.conversations import ConversationStore
from storage.files import FileStore
from storage.responses import ResponseStore
from tenancy.directory import Directory, Principal
from tenancy.quotas import QuotaGate
from tenancy.usage_log import UsageJournal

logger = logging.getLogger(__name__)

BATCH_JOB = "batch"
OUTPUT_PURPOSE = "batch_output"
TRANSIENT_TRIES = 8  # a line refused for a moment (the pool at capacity, an engine restarting) is tried again
TRANSIENT_WAIT_MAX_S = 15.0
STATUS_EVERY_S = 0.5  # how often a running batch looks whether it was cancelled or ran past its window
COUNTS_EVERY_S = 1.0  # how often its request_counts are brought up to date while lines end
UNRUN = {
    "cancelled": ("batch_cancelled", "the batch was cancelled before this request ran"),
    "expired": ("batch_expired", "the batch's completion window ended before this request ran"),
    "insufficient_quota": (
        "insufficient_quota",
        "the tenant's monthly budget ran out before this request ran; raise it and submit these lines again",
    ),
}


def line_request_id(batch_id: str, line: int, endpoint: str = "/v1/chat/completions") -> str:
    """The request id of a batch line: the same each time the line runs, so its usage row is one row."""
    prefix = REQUEST_PREFIX["embeddings"] if endpoint == "/v1/embeddings" else "chatcmpl"
    return f"{prefix}-" + hashlib.sha256(f"{batch_id}:{line}".encode()).hexdigest()[:32]


@dataclass
class BatchRunner:
    """The `batch` job's handler: `await runner(job)` runs one turn of the job's batch."""

    directory: Directory
    quotas: QuotaGate
    service: InferenceService
    batches: BatchStore
    files: FileStore
    responses: ResponseStore | None
    conversations: ConversationStore | None
    journal: UsageJournal | None
    default_max_tokens: int
    file_expiry_days: int
    tasks: TaskService | None = None  # the embedding pools' service, for `/v1/embeddings` batches
    max_embedding_inputs: int = 2048
    concurrency: int = 8
    turn_s: float = 30.0
    _slots: asyncio.Semaphore = field(init=False)
    _counted: dict[str, float] = field(init=False, default_factory=dict)  # batch id -> when its counts were written

    def __post_init__(self) -> None:
        self._slots = asyncio.Semaphore(max(1, self.concurrency))

    async def __call__(self, job: Claimed) -> float | None:
        batch_id = str(job.payload["batch_id"])
        try:
            return await self._turn(batch_id, taken_over=job.attempt > 1)
        except asyncio.CancelledError:
            raise  # the gateway is stopping: another picks the batch up where it stopped
        except Exception as exc:
            logger.exception("batch %s failed", batch_id)
            failure = {"code": "server_error", "message": f"the batch could not run: {type(exc).__name__}: {exc}"}
            await asyncio.to_thread(self.batches.move, batch_id, "failed", errors=_errors([failure]))
            raise

    def gave_up(self, job: Claimed) -> None:
        """Ends a batch whose gateways died running it `max_attempts` times in a row: `failed`, saying so."""
        failure = {
            "code": "server_error",
            "message": f"the gateways running this batch stopped {job.attempt} times in a row; submit it again",
        }
        self.batches.move(str(job.payload["batch_id"]), "failed", errors=_errors([failure]))

    async def _turn(self, batch_id: str, *, taken_over: bool = False) -> float | None:
        """Runs lines for up to `turn_s`; returns 0 (another turn, after whoever waits) or None (the batch ended).
        `taken_over`: the gateway of the last turn died, maybe after a line was refused for the budget."""
        batch = await asyncio.to_thread(self.batches.get, None, batch_id)
        principal = await asyncio.to_thread(self.directory.by_key_id, batch.key_id)
        if principal is None or principal.tenant_id != batch.tenant_id:
            failure = {"code": "invalid_api_key", "message": "the key that created this batch no longer exists"}
            await asyncio.to_thread(self.batches.move, batch_id, "failed", errors=_errors([failure]))
            return None
        if batch.status == "validating" and not await self._validated(batch_id):
            return None
        pending = await asyncio.to_thread(self.batches.pending, batch_id)
        deadline = time.monotonic() + self.turn_s
        stop: str | None = None
        refused = asyncio.Event()  # a line was refused for the tenant's monthly budget
        if taken_over and await self._budget_ran_out(batch_id):
            refused.set()
        running: set[asyncio.Task[None]] = set()
        looked = 0.0
        try:
            for line in pending:
                if time.monotonic() - looked >= STATUS_EVERY_S:
                    stop, looked = await self._stop_reason(batch_id), time.monotonic()
                if stop is not None or refused.is_set() or time.monotonic() >= deadline:
                    break
                await self._slots.acquire()
                try:
                    await self.service.batch_room(str(line.body.get("model", "")))
                except BaseException:
                    self._slots.release()
                    raise
                task = asyncio.get_running_loop().create_task(self._line(batch.endpoint, principal, line, refused))
                running.add(task)
                task.add_done_callback(running.discard)
            await asyncio.gather(*running)
        except BaseException:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            raise
        await self._count(batch_id, force=True)
        if refused.is_set():
            stop = "insufficient_quota"
        left = await asyncio.to_thread(self.batches.pending, batch_id)
        if stop is None:
            stop = await self._stop_reason(batch_id)  # cancelled meanwhile: it ends cancelled, even with no line left
            if left and stop is None:
                return 0.0  # the turn is over: the batch goes back to the queue
        await self._finish(batch_id, batch.tenant_id, batch.endpoint, stop or "completed")
        self._counted.pop(batch_id, None)
        return None

    async def _stop_reason(self, batch_id: str) -> str | None:
        current = await asyncio.to_thread(self.batches.get, None, batch_id)
        if current.status == "cancelling":
            return "cancelled"
        if self.batches.past_window(current):
            return "expired"
        return None

    async def _budget_ran_out(self, batch_id: str) -> bool:
        """Whether a line of the batch has been refused for its tenant's monthly budget."""
        lines = await asyncio.to_thread(self.batches.lines, batch_id)
        return any(_refused_for_budget(line) for line in lines)

    async def _validated(self, batch_id: str) -> bool:
        batch = await asyncio.to_thread(self.batches.get, None, batch_id)
        try:
            content = await asyncio.to_thread(self.files.content, batch.tenant_id, batch.input_file_id)
        except NotFound as exc:
            failure = {"code": "invalid_file", "message": exc.message, "param": "input_file_id", "line": None}
            await asyncio.to_thread(self.batches.move, batch_id, "failed", errors=_errors([failure]))
            return False
        lines, errors = read_lines(content, batch.endpoint)
        if errors:
            await asyncio.to_thread(self.batches.move, batch_id, "failed", errors=_errors(errors))
            return False
        await asyncio.to_thread(self.batches.add_lines, batch_id, lines)
        counts = {"total": len(lines), "completed": 0, "failed": 0}
        moved = await asyncio.to_thread(
            self.batches.move, batch_id, "in_progress", only_from="validating", request_counts=counts
        )
        return moved["status"] in ("in_progress", "cancelling")  # cancelled while validating: lines end cancelled

    async def _line(self, endpoint: str, principal: Principal, line: BatchLine, refused: asyncio.Event) -> None:
        """Runs one line and commits its result with its usage; sets `refused` when the tenant's budget refused
        it."""
        request_id = line_request_id(line.batch_id, line.line, endpoint)
        try:
            status, body = await self._answer(endpoint, line.body, principal, request_id)
        finally:
            self._slots.release()
        result = _result(line.custom_id, status, body, request_id)

        def write(s: Any) -> bool:
            return self.batches.record_line(s, line.batch_id, line.line, ok=status == 200, result=result)

        try:
            if self.journal is not None:
                await asyncio.to_thread(self.journal.settle_batch_line, request_id, write)
            else:
                await asyncio.to_thread(
                    self.batches.finish_line, line.batch_id, line.line, ok=status == 200, result=result
                )
        except Exception:
            if self.journal is not None:
                self.journal.forget_batch_line(request_id)
            logger.exception("batch %s line %d: its result could not be committed; it runs again", *_where(line))
            return
        if status != 200 and (body.get("error") or {}).get("code") == QuotaExceeded.default_code:
            refused.set()
        await self._count(line.batch_id)

    async def _count(self, batch_id: str, *, force: bool = False) -> None:
        """Brings the batch's `request_counts` up to date, at most every `COUNTS_EVERY_S` unless forced."""
        if not force and time.monotonic() - self._counted.get(batch_id, 0.0) < COUNTS_EVERY_S:
            return
        self._counted[batch_id] = time.monotonic()
        try:
            counts = await asyncio.to_thread(self.batches.counts, batch_id)
            await asyncio.to_thread(self.batches.move, batch_id, request_counts=counts)
        except Exception:  # the counts catch up with the next line
            logger.warning("batch %s: its request counts could not be updated", batch_id, exc_info=True)

    async def _answer(
        self, endpoint: str, body: dict[str, Any], principal: Principal, request_id: str
    ) -> tuple[int, dict[str, Any]]:
        """One line through its endpoint's path: its status code and response body (an error in OpenAI's shape)."""
        raw = json.dumps({**body, "stream": False, "priority": "batch"}).encode()
        quotas = self.quotas.for_batch_line(request_id)

        async def attempt() -> Any:
            if endpoint == "/v1/embeddings":
                if self.tasks is None:
                    raise NotFound("this server has no embedding pools", code="model_not_found", param="model")
                embedded, _ = await create_embeddings(
                    parse_embedding_request(json.dumps(body).encode()),
                    principal,
                    self.tasks,
                    quotas,
                    max_inputs=self.max_embedding_inputs,
                )
                return _Answered(embedded)
            if endpoint == "/v1/responses":
                req = parse_responses_request(raw)
                return await create_response(
                    req,
                    principal,
                    self.service,
                    quotas,
                    self.responses,
                    self.conversations,
                    default_max_tokens=self.default_max_tokens,
                )
            return await answer_chat(
                parse_chat_request(raw), principal, self.service, quotas, default_max_tokens=self.default_max_tokens
            )

        try:
            answered = await _patiently(attempt, request_id)
        except Exception as exc:  # a line must not take its batch down with it
            if not isinstance(exc, TesseraError):
                logger.exception("a batch line failed")
            err = to_api_error(exc)
            return err.status_code, err.body()
        return int(answered.status_code or 200), dict(answered.content)

    async def _finish(self, batch_id: str, tenant_id: str, endpoint: str, stop: str) -> None:
        """Writes the output and error files, settles what crashed runs of its lines left open, ends the batch."""
        await asyncio.to_thread(self.batches.move, batch_id, "finalizing")
        output: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        lines = await asyncio.to_thread(self.batches.lines, batch_id)
        for line in lines:
            if line.ok is None:
                failed.append(_unrun(line.custom_id, stop))
            else:
                (output if line.ok else failed).append(line.result or {})
        if self.journal is not None:
            ids = [line_request_id(batch_id, line.line, endpoint) for line in lines]
            await asyncio.to_thread(self.journal.settle_abandoned, ids)

        def write(rows: list[dict[str, Any]], name: str) -> str | None:
            if not rows:
                return None
            content = "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows).encode()
            made = self.files.create(
                tenant_id, OUTPUT_PURPOSE, f"{batch_id}_{name}.jsonl", content, expires_days=self.file_expiry_days
            )
            return made.id

        output_id = await asyncio.to_thread(write, output, "output")
        error_id = await asyncio.to_thread(write, failed, "error")
        counts = {"total": len(lines), "completed": len(output), "failed": len(failed)}
        status = "completed" if stop == "insufficient_quota" else stop
        await asyncio.to_thread(
            self.batches.move, batch_id, status, output_file_id=output_id, error_file_id=error_id, request_counts=counts
        )


@dataclass(frozen=True)
class _Answered:
    """An endpoint's answer in the shape the chat paths return theirs (a status code and a body)."""

    content: dict[str, Any]
    status_code: int = 200


async def _patiently(attempt: Any, request_id: str) -> Any:
    """`attempt()`, tried again while it is refused for a moment (rate limited, the pool at capacity, an engine
    restarting), after its `retry-after`, up to `TRANSIENT_TRIES` times."""
    for tries in range(1, TRANSIENT_TRIES + 1):
        try:
            return await attempt()
        except (RateLimited, Unavailable) as exc:
            if tries == TRANSIENT_TRIES or (exc.code == "metering_unavailable" and tries > 2):
                raise
            wait = min(TRANSIENT_WAIT_MAX_S, float(exc.retry_after_s or 1.0))
            logger.info("batch line %s waits %.1f s (%s)", request_id, wait, exc.code)
            await asyncio.sleep(wait)
    raise AssertionError("unreachable")


def _where(line: BatchLine) -> tuple[str, int]:
    return line.batch_id, line.line


def _refused_for_budget(line: BatchLine) -> bool:
    if line.ok is not False or not line.result or not line.result.get("response"):
        return False
    error = (line.result["response"].get("body") or {}).get("error") or {}
    return bool(error.get("code") == QuotaExceeded.default_code)


def _errors(data: list[dict[str, Any]]) -> dict[str, Any]:
    return {"object": "list", "data": data}


def _result(custom_id: str, status: int, body: dict[str, Any], line_id: str) -> dict[str, Any]:
    """The line as the output or error file holds it (OpenAI's format); an answer without an id of its own (an
    embeddings list) carries the line's request id, which its receipt is filed under."""
    request_id = body.get("id", line_id) if status == 200 else None
    response = {"status_code": status, "request_id": request_id, "body": body}
    return {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": custom_id, "response": response, "error": None}


def _unrun(custom_id: str, stop: str) -> dict[str, Any]:
    code, message = UNRUN[stop]
    return {
        "id": f"batch_req_{uuid.uuid4().hex}",
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }
