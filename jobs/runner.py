"""The job runner: work that outlives a request, claimed by one gateway replica at a time and run to an end.

A job is a row (`db.models.Job`) of a kind and a JSON payload. Every gateway runs a runner, which runs up to
`concurrency` jobs at once. A runner claims a ready job (on PostgreSQL with `FOR UPDATE SKIP LOCKED`, so replicas
take disjoint jobs) under a lease it renews while the job's handler works. A replica that dies stops renewing: once
the lease lapses another replica claims the job again, up to `max_attempts` tries in all. Cancelling a queued job
ends it at once; a running one is flagged and its runner cancels the handler at its next renewal. Handlers do their
own domain updates (a stored response's status, a batch's lines); the runner only records how the job ended.

Claims are fair across tenants: of the ready jobs, the one whose tenant was served least recently goes first, then
the longest ready. A long job (a batch) works in turns: its handler returns after a while with the seconds until it
wants its next turn, and the job goes back to the queue, behind other tenants' work. Periodic work (the sweeps) is
a job of a fixed id that returns its interval each time.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, or_
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import aliased
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


# A handler returns None when its job is done, or the seconds until the job's next turn.
Handler = Callable[[Claimed], Coroutine[Any, Any, float | None]]


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
        concurrency: int = 4,
        clock: Callable[[], datetime] = utcnow,
        gave_up: dict[str, Callable[[Claimed], None]] | None = None,
    ) -> None:
        """`gave_up` maps a kind to what ends a job of it in its domain when its runners died `max_attempts` times
        (a batch then ends `failed`)."""
        self._db = db
        self._handlers = handlers
        self.owner = owner or f"runner-{uuid.uuid4().hex[:12]}"
        self._lease = timedelta(seconds=lease_s)
        self._poll_s = poll_s
        self._max_attempts = max_attempts
        self._concurrency = max(1, concurrency)
        self._clock = clock
        self.running: set[str] = set()  # the jobs this runner is working on
        self._gave_up = gave_up or {}

    # -- the queue --------------------------------------------------------------------------------------------

    def enqueue(
        self, kind: str, payload: dict[str, Any], *, tenant_id: str | None = None, job_id: str | None = None
    ) -> str:
        if kind not in self._handlers:
            raise ValueError(f"no handler for jobs of kind {kind!r}")
        now = self._clock()
        job = Job(
            id=job_id or f"job_{uuid.uuid4().hex}",
            kind=kind,
            tenant_id=tenant_id,
            payload=payload,
            created_at=now,
            updated_at=now,
            ready_at=now,
        )
        with Session(self._db, expire_on_commit=False) as s:
            s.add(job)
            s.commit()
        return job.id

    def schedule(self, kind: str, job_id: str, payload: dict[str, Any] | None = None) -> bool:
        """Makes sure the periodic job `job_id` exists (every gateway calls this; one row results). Its handler
        returns its interval to come back. A periodic job that ended (failed) is queued again. Returns whether
        this call queued it."""
        with Session(self._db, expire_on_commit=False) as s:
            job = s.get(Job, job_id, with_for_update=True)
            if job is not None:
                if job.status not in FINISHED:
                    return False
                job.status, job.attempts, job.error, job.ready_at = "queued", 0, None, self._clock()
                s.add(job)
                s.commit()
                return True
        try:
            self.enqueue(kind, payload or {}, job_id=job_id)
        except IntegrityError:
            return False  # another gateway made it first
        return True

    def status(self, job_id: str) -> str | None:
        with Session(self._db, expire_on_commit=False) as s:
            job = s.get(Job, job_id)
            return job.status if job is not None else None

    def cancel(self, job_id: str, *, running: bool = True) -> str | None:
        """Cancels a job: a queued one at once, a running one (unless `running` is False: its handler ends it its
        own way) at its runner's next renewal. Returns the job's status afterwards (None: no such job)."""
        with Session(self._db, expire_on_commit=False) as s:
            job = s.get(Job, job_id, with_for_update=True)
            if job is None:
                return None
            if job.status == "queued":
                job.status = "cancelled"
            elif job.status == "running" and running:
                job.cancel_requested = True
            job.updated_at = self._clock()
            s.add(job)
            s.commit()
            return job.status

    def claim(self) -> Claimed | None:
        """A ready job, or a running one whose lease lapsed, leased to this runner: of those, the one whose tenant
        was served least recently, then the longest ready."""
        now = self._clock()
        other = aliased(Job)
        served = (
            select(func.max(other.claimed_at))
            .where(col(other.tenant_id) == col(Job.tenant_id))
            .correlate(Job)
            .scalar_subquery()
        )
        with Session(self._db, expire_on_commit=False) as s:
            job = s.exec(
                select(Job)
                .where(
                    or_(
                        (col(Job.status) == "queued") & (col(Job.ready_at) <= now),
                        (col(Job.status) == "running") & (col(Job.lease_until) < now),
                    )
                )
                .order_by(served.asc().nulls_first(), col(Job.ready_at), col(Job.id))
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
                self._give_up(Claimed(job.id, job.kind, job.tenant_id, dict(job.payload), job.attempts))
                return self.claim()
            job.status, job.owner, job.lease_until = "running", self.owner, now + self._lease
            job.attempts += 1
            job.updated_at = job.claimed_at = now
            s.add(job)
            s.commit()
            return Claimed(job.id, job.kind, job.tenant_id, dict(job.payload), job.attempts)

    def _give_up(self, job: Claimed) -> None:
        ending = self._gave_up.get(job.kind)
        if ending is None:
            return
        try:
            ending(job)
        except Exception:
            logger.exception("job %s: ending it after its runners died failed", job.id)

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

    def _finish(self, job_id: str, status: str, error: str | None = None, again_s: float | None = None) -> None:
        """Records how the job's turn ended: finished as `status`, or (with `again_s`) back in the queue for its next
        turn, its attempts counted afresh; a job cancelled meanwhile ends cancelled."""
        with Session(self._db, expire_on_commit=False) as s:
            job = s.get(Job, job_id, with_for_update=True)
            if job is None or job.owner != self.owner or job.status in FINISHED:
                return
            now = self._clock()
            if again_s is not None and status == "succeeded" and not job.cancel_requested:
                job.status, job.attempts, job.owner = "queued", 0, None
                job.ready_at = now + timedelta(seconds=again_s)
            else:
                job.status, job.error = status, error
            job.lease_until, job.updated_at = None, now
            s.add(job)
            s.commit()

    # -- running ----------------------------------------------------------------------------------------------

    async def run_once(self) -> bool:
        """Claims one job and runs its turn to its end; False when there was none."""
        claimed = await asyncio.to_thread(self.claim)
        if claimed is None:
            return False
        return await self._turn(claimed)

    async def _run(self, claimed: Claimed) -> None:
        handler = self._handlers.get(claimed.kind)
        if handler is None:
            await asyncio.to_thread(self._finish, claimed.id, "failed", f"no handler for {claimed.kind!r}")
            return
        work = asyncio.get_running_loop().create_task(handler(claimed))
        renew_every = self._lease.total_seconds() / 3
        while not work.done():
            await asyncio.wait({work}, timeout=renew_every)
            if not work.done() and not await asyncio.to_thread(self._renew, claimed.id):
                work.cancel()
        status, error, again_s = "succeeded", None, None
        try:
            again_s = await work
        except asyncio.CancelledError:
            status, error = "cancelled", None
        except Exception as exc:
            logger.exception("job %s (%s) failed", claimed.id, claimed.kind)
            status, error = "failed", f"{type(exc).__name__}: {exc}"[:1000]
        await asyncio.to_thread(self._finish, claimed.id, status, error, again_s)

    async def run_forever(self) -> None:
        """Runs up to `concurrency` jobs at once until cancelled; waits `poll_s` when no job is ready."""
        turns: set[asyncio.Task[bool]] = set()
        try:
            while True:
                while len(turns) < self._concurrency:
                    try:
                        claimed = await asyncio.to_thread(self.claim)
                    except Exception:
                        logger.exception("the job runner failed to claim a job; trying again")
                        claimed = None
                    if claimed is None:
                        break
                    turns.add(asyncio.get_running_loop().create_task(self._turn(claimed)))
                wait = {asyncio.ensure_future(asyncio.sleep(self._poll_s)), *turns}
                done, _ = await asyncio.wait(wait, return_when=asyncio.FIRST_COMPLETED)
                turns -= done
                for task in wait - turns:
                    task.cancel()
        finally:
            for task in turns:
                task.cancel()
            await asyncio.gather(*turns, return_exceptions=True)

    async def _turn(self, claimed: Claimed) -> bool:
        self.running.add(claimed.id)
        try:
            await self._run(claimed)
        except asyncio.CancelledError:
            raise
        except Exception:  # recording the end failed: the lease lapses and the job comes back
            logger.exception("job %s: its end could not be recorded", claimed.id)
        finally:
            self.running.discard(claimed.id)
        return True
