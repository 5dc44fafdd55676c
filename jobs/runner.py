"""The job runner: work that outlives a request, claimed by one gateway replica at a time and run to an end.

A job is a row (`db.models.Job`) of a kind and a JSON payload. Every gateway runs a runner; a runner claims the
oldest queued job (on PostgreSQL with `FOR UPDATE SKIP LOCKED`, so replicas take disjoint jobs) under a lease it
renews while the job's handler works. A replica that dies stops renewing: once the lease lapses another replica
claims the job again, up to `max_attempts` tries in all. Cancelling a queued job ends it at once; a running one is
flagged and its runner cancels the handler at its next renewal. Handlers do their own domain updates (a stored
response's status); the runner only records how the job ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, or_
from sqlmodel import Session, col, select

from db.models import Job, utcnow

logger = logging.getLogger(__name__)

FINISHED = frozenset({"succeeded", "failed", "cancelled"})


@dataclass(frozen=True)
class Claimed:
    """A job as its handler sees it."""

    id: str
    kind: str
    tenant_id: str | None
    payload: dict[str, Any]
    attempt: int


Handler = Callable[[Claimed], Coroutine[Any, Any, None]]


class JobRunner:
    def __init__(
        self,
        db: Engine,
        handlers: dict[str, Handler],
        *,
        owner: str | None = None,
        lease_s: float = 60.0,
        poll_s: float = 1.0,
        max_attempts: int = 3,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._db = db
        self._handlers = handlers
        self.owner = owner or f"runner-{uuid.uuid4().hex[:12]}"
        self._lease = timedelta(seconds=lease_s)
        self._poll_s = poll_s
        self._max_attempts = max_attempts
        self._clock = clock

    # -- the queue --------------------------------------------------------------------------------------------

    def enqueue(
        self, kind: str, payload: dict[str, Any], *, tenant_id: str | None = None, job_id: str | None = None
    ) -> str:
        if kind not in self._handlers:
            raise ValueError(f"no handler for jobs of kind {kind!r}")
        job = Job(id=job_id or f"job_{uuid.uuid4().hex}", kind=kind, tenant_id=tenant_id, payload=payload)
        with Session(self._db, expire_on_commit=False) as s:
            s.add(job)
            s.commit()
        return job.id

    def status(self, job_id: str) -> str | None:
        with Session(self._db, expire_on_commit=False) as s:
            job = s.get(Job, job_id)
            return job.status if job is not None else None

    def cancel(self, job_id: str) -> str | None:
        """Cancels a job: a queued one at once, a running one at its runner's next renewal. Returns the job's
        status afterwards (None: no such job)."""
        with Session(self._db, expire_on_commit=False) as s:
            job = s.get(Job, job_id, with_for_update=True)
            if job is None:
                return None
            if job.status == "queued":
                job.status = "cancelled"
            elif job.status == "running":
                job.cancel_requested = True
            job.updated_at = self._clock()
            s.add(job)
            s.commit()
            return job.status

    def claim(self) -> Claimed | None:
        """The oldest queued job, or a running one whose lease lapsed, leased to this runner."""
        now = self._clock()
        with Session(self._db, expire_on_commit=False) as s:
            job = s.exec(
                select(Job)
                .where(
                    or_(
                        col(Job.status) == "queued",
                        (col(Job.status) == "running") & (col(Job.lease_until) < now),
                    )
                )
                .order_by(col(Job.created_at))
                .limit(1)
                .with_for_update(skip_locked=True)
            ).first()
            if job is None:
                return None
            if job.attempts >= self._max_attempts:
                job.status, job.error, job.updated_at = "failed", f"gave up after {job.attempts} attempts", now
                s.add(job)
                s.commit()
                logger.warning("job %s failed: its runners died %d times", job.id, job.attempts)
                return self.claim()
            job.status, job.owner, job.lease_until = "running", self.owner, now + self._lease
            job.attempts += 1
            job.updated_at = now
            s.add(job)
            s.commit()
            return Claimed(job.id, job.kind, job.tenant_id, dict(job.payload), job.attempts)

    def _renew(self, job_id: str) -> bool:
        """Extends this runner's lease; False when the job was cancelled or is no longer this runner's."""
        with Session(self._db, expire_on_commit=False) as s:
            job = s.get(Job, job_id, with_for_update=True)
            if job is None or job.owner != self.owner or job.status != "running" or job.cancel_requested:
                return False
            job.lease_until = self._clock() + self._lease
            s.add(job)
            s.commit()
            return True

    def _finish(self, job_id: str, status: str, error: str | None = None) -> None:
        with Session(self._db, expire_on_commit=False) as s:
            job = s.get(Job, job_id, with_for_update=True)
            if job is None or job.owner != self.owner or job.status in FINISHED:
                return
            job.status, job.error, job.lease_until, job.updated_at = status, error, None, self._clock()
            s.add(job)
            s.commit()

    # -- running ----------------------------------------------------------------------------------------------

    async def run_once(self) -> bool:
        """Claims one job and runs it to its end; False when there was none."""
        claimed = await asyncio.to_thread(self.claim)
        if claimed is None:
            return False
        handler = self._handlers.get(claimed.kind)
        if handler is None:
            await asyncio.to_thread(self._finish, claimed.id, "failed", f"no handler for {claimed.kind!r}")
            return True
        work = asyncio.get_running_loop().create_task(handler(claimed))
        renew_every = self._lease.total_seconds() / 3
        while not work.done():
            await asyncio.wait({work}, timeout=renew_every)
            if not work.done() and not await asyncio.to_thread(self._renew, claimed.id):
                work.cancel()
        status, error = "succeeded", None
        try:
            await work
        except asyncio.CancelledError:
            status, error = "cancelled", None
        except Exception as exc:
            logger.exception("job %s (%s) failed", claimed.id, claimed.kind)
            status, error = "failed", f"{type(exc).__name__}: {exc}"[:1000]
        await asyncio.to_thread(self._finish, claimed.id, status, error)
        return True

    async def run_forever(self) -> None:
        """Runs jobs one at a time until cancelled; waits `poll_s` when the queue is empty."""
        while True:
            try:
                ran = await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("the job runner failed to claim a job; trying again")
                ran = False
            if not ran:
                await asyncio.sleep(self._poll_s)


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
