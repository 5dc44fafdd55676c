"""Admission by KV blocks, per model pool, decided before media is decoded.

The budget is the engine's real KV capacity (blocks x block size) minus a reserved decode headroom. A
request holds ceil((fused prompt + max_tokens) / block size) blocks from admission until it leaves the
engine, so the sum of what the engine is asked to hold never exceeds what it has, and it never needs to
preempt. Waiting requests are served by priority class first, then cheapest first, and a cheap request may
use room that the next costlier one cannot; the wait queue is bounded in length and in time, which
also bounds how long a large request can be passed over. Batch-class requests may hold at most a share
of the budget (75% by default), so interactive requests never wait behind a batch burst.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from dataclasses import dataclass, field

from serving.errors import InvalidRequest, Unavailable

PRIORITIES = {"interactive": 0, "batch": 1}


class AdmissionRejected(Unavailable):
    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message, code="server_overloaded", retry_after_s=retry_after_s)


class RequestTooLarge(InvalidRequest):
    def __init__(self, message: str) -> None:
        super().__init__(message, code="request_too_large", param="max_tokens")


@dataclass
class Ticket:
    blocks: int
    priority: int = 0
    released: bool = False
    answering: bool = False  # its first token has come (an interactive request's prefill is behind it)


@dataclass(order=True)
class _Waiter:
    priority: int
    blocks: int
    seq: int
    future: asyncio.Future[Ticket] = field(compare=False)


class AdmissionController:
    def __init__(
        self,
        *,
        total_blocks: int,
        block_size: int,
        headroom_blocks: int,
        max_queue: int = 64,
        max_wait_s: float = 30.0,
        enabled: bool = True,
        batch_share: float = 0.75,
    ) -> None:
        self.block_size = block_size
        self.budget = max(1, total_blocks - headroom_blocks)
        # Batch-class work may hold at most this share, so interactive requests always find room quickly.
        self.batch_budget = max(1, int(self.budget * batch_share))
        self.batch_in_use = 0
        self.max_queue = max_queue
        self.max_wait_s = max_wait_s
        self.enabled = enabled
        self.in_use = 0
        self.admitted = 0
        self.rejected = 0
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()
        self._room_waiters: list[asyncio.Future[None]] = []
        self.interactive_prefilling = 0  # interactive requests admitted whose first token has not come yet

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    @property
    def queue_depth(self) -> int:
        return sum(1 for w in self._waiting if not w.future.done())

    @property
    def free_fraction(self) -> float:
        return max(0.0, (self.budget - self.in_use) / self.budget)

    @property
    def batch_room(self) -> bool:
        """Whether a batch line may start now: no interactive request waits for capacity or for its first token
        (a batch prefill beside it would delay that token), and the batch share has room."""
        if not self.enabled:
            return True
        interactive_waiting = any(w.priority == 0 and not w.future.done() for w in self._waiting)
        return not interactive_waiting and not self.interactive_prefilling and self.batch_in_use < self.batch_budget

    def answering(self, ticket: Ticket) -> None:
        """The ticket's request has its first token: an interactive one no longer holds batch lines back."""
        if ticket.answering or ticket.released:
            return
        ticket.answering = True
        if ticket.priority == 0 and ticket.blocks:
            self.interactive_prefilling -= 1
            self._wake()

    async def wait_batch_room(self) -> None:
        """Returns once `batch_room` holds (checked again whenever capacity is released or a waiter granted)."""
        while not self.batch_room:
            room = asyncio.get_running_loop().create_future()
            self._room_waiters.append(room)
            try:
                await room
            finally:
                if room in self._room_waiters:
                    self._room_waiters.remove(room)

    async def acquire(self, tokens: int, priority: str = "interactive") -> Ticket:
        blocks = self.blocks_for(tokens)
        if not self.enabled:
            return Ticket(0)
        if blocks > (self.budget if PRIORITIES.get(priority, 0) == 0 else self.batch_budget):
            raise RequestTooLarge(
                f"the request needs {blocks} KV blocks ({tokens} tokens); this model admits at "
                f"most {self.budget} blocks ({self.budget * self.block_size} tokens)"
            )
        rank = PRIORITIES.get(priority, 0)
        if not self._waiting and self._fits(blocks, rank):
            return self._grant(blocks, rank)
        if self.queue_depth >= self.max_queue:
            self.rejected += 1
            raise AdmissionRejected(
                "the model is at capacity and its wait queue is full", retry_after_s=self._retry_after()
            )
        waiter = _Waiter(
            PRIORITIES.get(priority, 0), blocks, next(self._seq), asyncio.get_running_loop().create_future()
        )
        heapq.heappush(self._waiting, waiter)
        self._wake()  # it may outrank everyone waiting, and fit now
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), self.max_wait_s)
        except TimeoutError:
            self.rejected += 1
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(waiter.future.result())  # granted just as the wait ran out
            waiter.future.cancel()
            raise AdmissionRejected(
                f"waited {self.max_wait_s:g}s for capacity", retry_after_s=self._retry_after()
            ) from None
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(waiter.future.result())
            waiter.future.cancel()
            raise

    def release(self, ticket: Ticket) -> None:
        if ticket.released:
            return
        ticket.released = True
        self.in_use -= ticket.blocks
        if ticket.priority > 0:
            self.batch_in_use -= ticket.blocks
        elif not ticket.answering and ticket.blocks:
            self.interactive_prefilling -= 1
        self._wake()

    def _fits(self, blocks: int, rank: int) -> bool:
        if self.in_use + blocks > self.budget:
            return False
        return rank == 0 or self.batch_in_use + blocks <= self.batch_budget

    def _grant(self, blocks: int, rank: int = 0) -> Ticket:
        self.in_use += blocks
        if rank > 0:
            self.batch_in_use += blocks
        elif blocks:
            self.interactive_prefilling += 1
        self.admitted += 1
        return Ticket(blocks, rank)

    def _wake(self) -> None:
        """Grant waiters in (priority, cost) order; a cheaper one may use room a costlier one cannot."""
        self._waiting = [w for w in self._waiting if not w.future.done()]
        heapq.heapify(self._waiting)
        keep: list[_Waiter] = []
        while self._waiting:
            waiter = heapq.heappop(self._waiting)
            if self._fits(waiter.blocks, waiter.priority):
                waiter.future.set_result(self._grant(waiter.blocks, waiter.priority))
            else:
                keep.append(waiter)
        self._waiting = keep
        heapq.heapify(self._waiting)
        if self._room_waiters and self.batch_room:
            for room in self._room_waiters:
                if not room.done():
                    room.set_result(None)
            self._room_waiters.clear()

    def _retry_after(self) -> float:
        return max(1.0, min(self.max_wait_s, 2.0 + self.queue_depth * 0.5))
