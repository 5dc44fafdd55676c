"""Batches (`/v1/batches`): the batch object as the API shows it, and its lines with their results, in the database
every gateway shares. A line's result is committed as soon as the line has run, so a batch picked up again after
its gateway died goes on with the lines not yet run. Another tenant's batch id is not found."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func
from sqlmodel import Session, col, select

from db.models import Batch, BatchLine, aware, utcnow
from serving.errors import InvalidRequest, NotFound

__all__ = ["BatchLine", "BatchStore"]  # a line as the runner reads it

PAGE_MAX = 100
WINDOWS = {"24h": timedelta(hours=24)}
ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
# The status each moment names (OpenAI's batch object carries one `<status>_at` per status it passed through).
STAMPS = {
    "in_progress": "in_progress_at",
    "finalizing": "finalizing_at",
    "completed": "completed_at",
    "failed": "failed_at",
    "expired": "expired_at",
    "cancelling": "cancelling_at",
    "cancelled": "cancelled_at",
}


def _unix(moment: datetime) -> int:
    return int(aware(moment).timestamp())


class BatchStore:
    def __init__(self, db: Engine, clock: Callable[[], datetime] = utcnow) -> None:
        self._db = db
        self._clock = clock

    def create(
        self,
        *,
        tenant_id: str,
        key_id: str,
        endpoint: str,
        input_file_id: str,
        completion_window: str,
        metadata: dict[str, str] | None,
    ) -> dict[str, Any]:
        if completion_window not in WINDOWS:
            raise InvalidRequest(f"completion_window must be one of {', '.join(WINDOWS)}", param="completion_window")
        now = self._clock()
        batch_id = f"batch_{uuid.uuid4().hex}"
        expires = now + WINDOWS[completion_window]
        body: dict[str, Any] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": endpoint,
            "errors": None,
            "input_file_id": input_file_id,
            "completion_window": completion_window,
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": _unix(now),
            "expires_at": _unix(expires),
            **dict.fromkeys(STAMPS.values()),
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
            "metadata": metadata or None,
        }
        row = Batch(
            id=batch_id,
            tenant_id=tenant_id,
            key_id=key_id,
            endpoint=endpoint,
            input_file_id=input_file_id,
            completion_window=completion_window,
            status="validating",
            body=body,
            created_at=now,
            expires_at=expires,
        )
        with Session(self._db) as s:
            s.add(row)
            s.commit()
        return body

    def get(self, tenant_id: str | None, batch_id: str) -> Batch:
        """A batch, its tenant's alone (`tenant_id` None: whichever tenant's, for the runner)."""
        with Session(self._db, expire_on_commit=False) as s:
            row = s.get(Batch, batch_id)
        if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
            raise NotFound(f"no batch with id '{batch_id}'", code="not_found", param="batch_id")
        return row

    def page(self, tenant_id: str, *, after: str | None = None, limit: int = 20) -> tuple[list[dict[str, Any]], bool]:
        """The tenant's batches, newest first, `limit` of them after the batch `after`."""
        if not 1 <= limit <= PAGE_MAX:
            raise InvalidRequest(f"limit must lie in [1, {PAGE_MAX}]", param="limit")
        query = select(Batch).where(Batch.tenant_id == tenant_id)
        if after is not None:
            try:
                anchor = self.get(tenant_id, after)
            except NotFound:
                raise InvalidRequest(f"no batch with id '{after}' to list after", param="after") from None
            query = query.where(
                (col(Batch.created_at) < anchor.created_at)
                | ((col(Batch.created_at) == anchor.created_at) & (col(Batch.id) < anchor.id))
            )
        with Session(self._db) as s:
            rows = s.exec(query.order_by(col(Batch.created_at).desc(), col(Batch.id).desc()).limit(limit + 1)).all()
        return [dict(row.body) for row in rows[:limit]], len(rows) > limit

    def recent(self, limit: int = 20, *, tenant_id: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        """The newest batches (one tenant's, or every tenant's), as (tenant id, batch object)."""
        query = select(Batch)
        if tenant_id is not None:
            query = query.where(Batch.tenant_id == tenant_id)
        with Session(self._db) as s:
            rows = s.exec(query.order_by(col(Batch.created_at).desc(), col(Batch.id).desc()).limit(limit)).all()
        return [(row.tenant_id, dict(row.body)) for row in rows]

    def move(
        self, batch_id: str, status: str | None = None, *, only_from: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Moves a batch to `status` (stamping its `<status>_at`) and sets `fields` of its object; a batch that
        has ended stays as it ended, and with `only_from` one in another status stays as it is. Returns the batch
        object."""
        with Session(self._db, expire_on_commit=False) as s:
            row = s.get(Batch, batch_id, with_for_update=True)
            if row is None:
                raise NotFound(f"no batch with id '{batch_id}'", param="batch_id")
            if row.status in ENDED or (only_from is not None and row.status != only_from):
                return dict(row.body)
            body = {**row.body, **fields}
            if status is not None:
                row.status = body["status"] = status
                if status in STAMPS:
                    body[STAMPS[status]] = _unix(self._clock())
            row.body = body
            s.add(row)
            s.commit()
            return dict(body)

    def past_window(self, row: Batch) -> bool:
        """Whether the batch's completion window has ended."""
        return aware(row.expires_at) <= self._clock()

    def add_lines(self, batch_id: str, lines: list[tuple[int, str, dict[str, Any]]]) -> None:
        """Records the batch's lines once (a batch picked up again keeps the lines it has)."""
        with Session(self._db) as s:
            known = set(s.exec(select(BatchLine.line).where(BatchLine.batch_id == batch_id)).all())
            s.add_all(
                BatchLine(batch_id=batch_id, line=n, custom_id=custom_id, body=body)
                for n, custom_id, body in lines
                if n not in known
            )
            s.commit()

    def pending(self, batch_id: str) -> list[BatchLine]:
        with Session(self._db, expire_on_commit=False) as s:
            query = select(BatchLine).where(BatchLine.batch_id == batch_id, col(BatchLine.ok).is_(None))
            return list(s.exec(query.order_by(col(BatchLine.line))).all())

    def finish_line(self, batch_id: str, line: int, *, ok: bool, result: dict[str, Any]) -> bool:
        """Records a line's result in a transaction of its own; False when it had one (the first stands)."""
        with Session(self._db) as s:
            written = self.record_line(s, batch_id, line, ok=ok, result=result)
            s.commit()
        return written

    @staticmethod
    def record_line(s: Session, batch_id: str, line: int, *, ok: bool, result: dict[str, Any]) -> bool:
        """Records a line's result within the caller's transaction `s` (which commits it with the line's usage);
        False when the line had one already: the first result stands."""
        row = s.get(BatchLine, (batch_id, line), with_for_update=True)
        if row is None or row.ok is not None:
            return False
        row.ok, row.result = ok, result
        s.add(row)
        return True

    def lines(self, batch_id: str) -> list[BatchLine]:
        with Session(self._db, expire_on_commit=False) as s:
            query = select(BatchLine).where(BatchLine.batch_id == batch_id).order_by(col(BatchLine.line))
            return list(s.exec(query).all())

    def counts(self, batch_id: str) -> dict[str, int]:
        """The batch's `request_counts`: its lines, those answered, and those that failed."""
        with Session(self._db) as s:
            query = select(BatchLine.ok, func.count()).where(BatchLine.batch_id == batch_id).group_by(col(BatchLine.ok))
            by_outcome = {ok: int(n) for ok, n in s.exec(query).all()}
        return {
            "total": sum(by_outcome.values()),
            "completed": by_outcome.get(True, 0),
            "failed": by_outcome.get(False, 0),
        }
