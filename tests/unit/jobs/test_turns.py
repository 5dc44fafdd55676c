"""The job runner's turns on SQLite and PostgreSQL: claims go to the tenant served least recently; a job that
returns the seconds to its next turn goes back to the queue behind other work and then runs again; a periodic job
exists once however many gateways schedule it; a runner works on several jobs at once."""

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


async def _noop(job):
    return None


def test_the_tenant_served_least_recently_goes_first(db):
    clock = Clock()
    runner = JobRunner(db, {"echo": _noop}, clock=clock)
    big = []
    for n in range(3):
        big.append(runner.enqueue("echo", {"n": n}, tenant_id="big"))
        clock.now += timedelta(seconds=1)
    small = runner.enqueue("echo", {}, tenant_id="small")
    order = []
    for _ in range(4):
        claimed = runner.claim()
        order.append(claimed.id)
        clock.now += timedelta(seconds=1)
    # The big tenant's first job is the oldest; then the small tenant (never served) goes before its other two.
    assert order == [big[0], small, big[1], big[2]]


def test_a_job_that_asks_for_another_turn_goes_behind_the_others_and_comes_back(db):
    clock = Clock()
    turns: list[str] = []

    async def long(job):
        turns.append("long")
        return 0.0 if turns.count("long") < 3 else None

    async def short(job):
        turns.append("short")

    runner = JobRunner(db, {"long": long, "short": short}, clock=clock)
    long_job = runner.enqueue("long", {}, tenant_id="a")
    clock.now += timedelta(seconds=1)
    runner.enqueue("short", {}, tenant_id="b")

    async def drain():
        while await runner.run_once():
            clock.now += timedelta(seconds=1)

    asyncio.run(drain())
    assert turns == ["long", "short", "long", "long"]
    assert runner.status(long_job) == "succeeded"


def test_a_turn_asked_for_later_waits_until_then_and_counts_its_attempts_afresh(db):
    clock = Clock()

    async def later(job):
        return 60.0

    runner = JobRunner(db, {"later": later}, clock=clock, max_attempts=1)
    job = runner.enqueue("later", {})
    for _ in range(3):  # max_attempts 1: a job that ends its turns normally never gives up
        assert asyncio.run(runner.run_once()) is True
        assert runner.status(job) == "queued"
        assert asyncio.run(runner.run_once()) is False  # not before its time
        clock.now += timedelta(seconds=61)


def test_a_periodic_job_exists_once_and_is_queued_again_once_it_ended(db):
    a, b = JobRunner(db, {"sweep": _noop}), JobRunner(db, {"sweep": _noop})
    assert a.schedule("sweep", "job_sweep") is True
    assert b.schedule("sweep", "job_sweep") is False
    claimed = a.claim()
    assert claimed.id == "job_sweep"
    a._finish(claimed.id, "failed", "broke")
    assert b.schedule("sweep", "job_sweep") is True  # a gateway starting later revives it
    assert a.status("job_sweep") == "queued"


def test_a_runner_works_on_several_jobs_at_once(db):
    async def scenario() -> int:
        inside, most = 0, 0
        gate = asyncio.Event()

        async def hold(job):
            nonlocal inside, most
            inside += 1
            most = max(most, inside)
            if inside == 3:
                gate.set()
            await asyncio.wait_for(gate.wait(), 10)
            inside -= 1

        runner = JobRunner(db, {"hold": hold}, poll_s=0.01, concurrency=3)
        jobs = [runner.enqueue("hold", {}) for _ in range(4)]
        loop = asyncio.create_task(runner.run_forever())
        try:
            for _ in range(1000):
                if all(runner.status(j) == "succeeded" for j in jobs):
                    break
                await asyncio.sleep(0.01)
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
        assert all(runner.status(j) == "succeeded" for j in jobs)
        return most

    assert asyncio.run(scenario()) == 3


def test_a_job_given_up_is_ended_in_its_domain(db):
    clock, ended = Clock(), []
    runner = JobRunner(db, {"batch": _noop}, clock=clock, lease_s=10, max_attempts=1, gave_up={"batch": ended.append})
    job = runner.enqueue("batch", {"batch_id": "b1"}, tenant_id="t")
    assert runner.claim().id == job  # its runner dies
    clock.now += timedelta(seconds=11)
    assert runner.claim() is None
    assert [(j.id, j.payload) for j in ended] == [(job, {"batch_id": "b1"})]
    assert runner.status(job) == "failed"
