import asyncio

import pytest

from serving.admission import AdmissionController, AdmissionRejected, RequestTooLarge


def _ctl(**kw):
    args = {"total_blocks": 10, "block_size": 16, "headroom_blocks": 2, "max_queue": 4, "max_wait_s": 5.0}
    args.update(kw)
    return AdmissionController(**args)


def test_block_arithmetic():
    ctl = _ctl()
    assert ctl.budget == 8
    assert ctl.blocks_for(1) == 1
    assert ctl.blocks_for(16) == 1
    assert ctl.blocks_for(17) == 2
    with pytest.raises(RequestTooLarge):
        asyncio.run(ctl.acquire(16 * 8 + 1))


def test_waiters_served_by_priority_then_cost():
    async def run():
        ctl = _ctl()
        held = await ctl.acquire(16 * 8)  # the whole budget
        order: list[str] = []

        async def want(name, tokens, priority):
            ticket = await ctl.acquire(tokens, priority)
            order.append(name)
            return ticket

        tasks = [
            asyncio.create_task(want("batch-small", 16, "batch")),
            asyncio.create_task(want("inter-big", 16 * 3, "interactive")),
            asyncio.create_task(want("inter-small", 16, "interactive")),
        ]
        await asyncio.sleep(0.01)
        assert ctl.queue_depth == 3
        ctl.release(held)
        tickets = await asyncio.gather(*tasks)
        assert order == ["inter-small", "inter-big", "batch-small"]
        assert ctl.in_use == 5
        for t in tickets:
            ctl.release(t)
            ctl.release(t)  # releasing twice is harmless
        assert ctl.in_use == 0

    asyncio.run(run())


def test_queue_is_bounded_in_count_and_time():
    async def run():
        ctl = _ctl(max_queue=1, max_wait_s=0.05)
        held = await ctl.acquire(16 * 8)
        waiter = asyncio.create_task(ctl.acquire(16))
        await asyncio.sleep(0.01)
        with pytest.raises(AdmissionRejected) as full:
            await ctl.acquire(16)
        assert full.value.retry_after_s >= 1
        with pytest.raises(AdmissionRejected):
            await waiter  # timed out
        assert ctl.in_use == 8
        ctl.release(held)
        assert ctl.in_use == 0

    asyncio.run(run())


def test_cancelled_waiter_never_leaks_blocks():
    async def run():
        ctl = _ctl()
        held = await ctl.acquire(16 * 8)
        waiter = asyncio.create_task(ctl.acquire(16 * 2))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        ctl.release(held)
        assert ctl.in_use == 0
        again = await ctl.acquire(16 * 8)
        assert again.blocks == 8

    asyncio.run(run())


def test_disabled_admission_admits_everything():
    async def run():
        ctl = _ctl(enabled=False)
        tickets = [await ctl.acquire(16 * 8) for _ in range(5)]
        assert ctl.in_use == 0
        assert all(t.blocks == 0 for t in tickets)

    asyncio.run(run())


def test_batch_class_cannot_crowd_out_interactive_requests():
    async def run():
        ctl = _ctl(batch_share=0.5)  # budget 8 blocks, batch may hold 4
        batch = [await ctl.acquire(16 * 2, "batch") for _ in range(2)]
        assert ctl.batch_in_use == 4
        blocked = asyncio.create_task(ctl.acquire(16, "batch"))
        await asyncio.sleep(0.01)
        assert not blocked.done()
        interactive = await asyncio.wait_for(ctl.acquire(16 * 3, "interactive"), 1)
        assert ctl.in_use == 7
        ctl.release(batch[0])
        third = await asyncio.wait_for(blocked, 1)
        for t in (batch[1], interactive, third):
            ctl.release(t)
        assert (ctl.in_use, ctl.batch_in_use) == (0, 0)

    asyncio.run(run())


def test_batch_work_waits_while_interactive_requests_queue_or_its_share_is_full():
    async def run():
        ctl = _ctl()  # budget 8 blocks, batch share 6
        assert ctl.batch_room
        held = await ctl.acquire(16 * 8)  # the whole budget, interactive
        waiting = asyncio.create_task(ctl.acquire(16, "interactive"))
        await asyncio.sleep(0.01)
        assert not ctl.batch_room  # an interactive request waits
        room = asyncio.create_task(ctl.wait_batch_room())
        await asyncio.sleep(0.01)
        assert not room.done()
        ctl.release(held)
        ticket = await waiting
        ctl.answering(ticket)  # its first token came
        await asyncio.wait_for(room, 1)  # the queue emptied
        batch = [await ctl.acquire(16 * 3, "batch"), await ctl.acquire(16 * 3, "batch")]
        assert not ctl.batch_room  # the batch share (6 blocks) is full, though 1 block is free
        room = asyncio.create_task(ctl.wait_batch_room())
        await asyncio.sleep(0.01)
        assert not room.done()
        ctl.release(batch[0])
        await asyncio.wait_for(room, 1)
        ctl.release(ticket)
        ctl.release(batch[1])

    asyncio.run(run())


def test_batch_work_waits_while_an_interactive_request_awaits_its_first_token():
    async def run():
        ctl = _ctl()
        interactive = await ctl.acquire(16)
        assert ctl.interactive_prefilling == 1
        assert not ctl.batch_room  # a batch prefill beside it would delay its first token
        room = asyncio.create_task(ctl.wait_batch_room())
        await asyncio.sleep(0.01)
        assert not room.done()
        ctl.answering(interactive)
        await asyncio.wait_for(room, 1)
        ctl.answering(interactive)  # told twice: counted once
        assert ctl.interactive_prefilling == 0
        ctl.release(interactive)
        assert ctl.interactive_prefilling == 0
        cut_short = await ctl.acquire(16)  # ends before its first token (refused, cancelled)
        batch = await ctl.acquire(16, "batch")
        assert (ctl.interactive_prefilling, ctl.batch_room) == (1, False)
        ctl.release(cut_short)
        assert (ctl.interactive_prefilling, ctl.batch_room) == (0, True)
        ctl.release(batch)

    asyncio.run(run())
