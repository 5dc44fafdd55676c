"""The job runner on SQLite and PostgreSQL: jobs run once and record how they ended, cancelling works queued and
running, a lapsed lease hands a job to another runner, and a job whose runners keep dying gives up."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from jobs.runner import JobRunner
from tests.clock import Clock
from tests.dbs import migrated


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    yield from migrated(request.param, tmp_path)


def _runner(db, handlers, **kw) -> JobRunner:
    return JobRunner(db, handlers, poll_s=0.01, **kw)


def test_a_job_runs_once_with_its_payload_and_succeeds(db):
    seen = []

    async def handle(job):
        seen.append((job.kind, job.tenant_id, job.payload, job.attempt))

    runner = _runner(db, {"echo": handle})
    job = runner.enqueue("echo", {"n": 1}, tenant_id="t1")
    assert runner.status(job) == "queued"
    assert asyncio.run(runner.run_once()) is True
    assert seen == [("echo", "t1", {"n": 1}, 1)]
    assert runner.status(job) == "succeeded"
    assert asyncio.run(runner.run_once()) is False  # nothing left: it never runs twice
    with pytest.raises(ValueError, match="no handler"):
        runner.enqueue("other", {})


def test_a_failing_job_records_its_error(db):
    async def handle(job):
        raise RuntimeError("the handler broke")

    runner = _runner(db, {"boom": handle})
    job = runner.enqueue("boom", {})
    asyncio.run(runner.run_once())
    assert runner.status(job) == "failed"


def test_a_queued_job_cancelled_never_runs(db):
    ran = []

    async def handle(job):
        ran.append(job.id)

    runner = _runner(db, {"echo": handle})
    job = runner.enqueue("echo", {})
    assert runner.cancel(job) == "cancelled"
    assert asyncio.run(runner.run_once()) is False
    assert ran == []
    assert runner.cancel("job_missing") is None


def test_a_running_job_cancelled_stops_at_its_next_renewal(db):
    started = asyncio.Event

    async def scenario():
        began = started()

        async def handle(job):
            began.set()
            await asyncio.sleep(30)

        runner = _runner(db, {"slow": handle}, lease_s=0.3)
        job = runner.enqueue("slow", {})
        run = asyncio.create_task(runner.run_once())
        await asyncio.wait_for(began.wait(), 10)
        assert await asyncio.to_thread(runner.cancel, job) == "running"
        await asyncio.wait_for(run, 10)
        return runner.status(job)

    assert asyncio.run(scenario()) == "cancelled"


def test_a_lapsed_lease_hands_the_job_to_another_runner_and_repeated_deaths_give_up(db):
    clock = Clock()

    async def handle(job):
        return None

    first = _runner(db, {"echo": handle}, lease_s=60, max_attempts=2, clock=clock)
    second = _runner(db, {"echo": handle}, lease_s=60, max_attempts=2, clock=clock)
    job = first.enqueue("echo", {})
    assert first.claim().id == job  # the first runner dies holding it
    assert second.claim() is None  # its lease still holds
    clock.now += timedelta(seconds=61)
    again = second.claim()
    assert (again.id, again.attempt) == (job, 2)
    clock.now += timedelta(seconds=61)  # the second dies too
    assert first.claim() is None  # no third attempt
    assert first.status(job) == "failed"


def test_two_runners_take_different_jobs(db):
    async def handle(job):
        return None

    a, b = _runner(db, {"echo": handle}), _runner(db, {"echo": handle})
    jobs = {a.enqueue("echo", {"n": n}) for n in range(2)}
    assert {a.claim().id, b.claim().id} == jobs
    assert a.claim() is None
