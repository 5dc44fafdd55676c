"""The embedding and transcription lease: whatever way the block ends it settles the caller's hold once with what
the lease says was used, gives the admission slot back and publishes one record naming its endpoint; a refusal
before the engine holds nothing and publishes nothing; a pool of another kind is a 400 naming `model`."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from serving.admission import AdmissionController
from serving.background import BackgroundTasks
from serving.errors import EngineUnavailable, NotFound, PermissionDenied, RequestShapeError
from serving.pools import PoolRegistry, TaskPool
from serving.record import CompletionBus, CompletionRecord, TokenUsage
from serving.task_lease import TaskService
from tests.stubs import RecordingCaller


def _service(healthy: bool = True):
    engine = SimpleNamespace(is_healthy=lambda: healthy, capacity=SimpleNamespace(max_model_len=256))
    pool = TaskPool("emb", "embedding", engine, tokenizer=None, aliases=["e"])
    pool.admission = AdmissionController(total_blocks=2, block_size=1, headroom_blocks=0)
    records: list[CompletionRecord] = []
    tasks = BackgroundTasks()
    service = TaskService(PoolRegistry([], [pool]), CompletionBus(tasks, [records.append]), tasks)
    return service, pool, records, tasks


WORST = TokenUsage(prompt=10, text=10)


@pytest.mark.parametrize("how", ["done", "failed", "cancelled"])
def test_every_exit_settles_once_releases_and_records(how):
    service, pool, records, tasks = _service()
    caller = RecordingCaller()

    async def run():
        async with service.lease(pool, caller, "embeddings", WORST) as lease:
            assert pool.admission.in_use == 1
            lease.used = TokenUsage(prompt=7, text=7)
            if how == "failed":
                raise RuntimeError("engine fell over")
            if how == "cancelled":
                raise asyncio.CancelledError
        return lease

    if how == "done":
        lease = asyncio.run(run())
        assert lease.request_id.startswith("embd-")
    else:
        with pytest.raises((RuntimeError, asyncio.CancelledError)):
            asyncio.run(run())
    asyncio.run(tasks.drain())
    assert pool.admission.in_use == 0
    assert caller.settled == [7]
    assert caller.reserved == [("emb", 10)]
    status = {"done": "completed", "failed": "failed", "cancelled": "cancelled"}[how]
    assert [(r.endpoint, r.model, r.status, r.usage.text) for r in records] == [("embeddings", "emb", status, 7)]


def test_refusals_before_the_engine_hold_nothing():
    service, pool, records, tasks = _service(healthy=False)
    caller = RecordingCaller()

    async def run(who):
        async with service.lease(pool, who, "embeddings", WORST):
            raise AssertionError("the block must not run")

    with pytest.raises(EngineUnavailable):
        asyncio.run(run(caller))
    asyncio.run(tasks.drain())
    assert caller.settled == [0]  # reserved, then given back with nothing used
    denied = RecordingCaller(allowed={"other"})
    with pytest.raises(PermissionDenied):
        asyncio.run(run(denied))
    assert denied.reserved == []
    assert records == []
    assert pool.admission.in_use == 0


def test_pools_are_found_by_kind():
    service, pool, _, _ = _service()
    assert service.pool("e", "embedding") is pool
    with pytest.raises(RequestShapeError) as wrong:
        service.pool("emb", "transcription")
    assert wrong.value.param == "model"
    with pytest.raises(NotFound):
        service.pool("nope", "embedding")
