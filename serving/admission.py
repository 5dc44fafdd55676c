"""Admission by KV blocks, per model pool, decided before media is decoded.

The budget is the engine's real KV capacity (blocks x block size) minus a reserved decode headroom. A
request holds ceil((fused prompt + max_tokens) / block size) blocks from admission until it leaves the
engine, so the sum of what the engine is asked to hold never exceeds what it has, and it never needs to
preempt. Waiting requests are served by priority class first, then cheapest first; the wait queue is
bounded in length and in time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from dataclasses import dataclass, field

from serving.errors import ServingError

PRIORITIES = {"interactive": 0, "batch": 1}


class AdmissionRejected(ServingError):
    unavailable = True

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message, code="server_overloaded")
        self.retry_after_s = retry_after_s


class RequestTooLarge(ServingError):
    def __init__(self, message: str) -> None:
        super().__init__(message, code="request_too_large", param="max_tokens")


@dataclass
class Ticket:
    blocks: int
    released: bool = False


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
    ) -> None:
        self.block_size = block_size
        self.budget = max(1, total_blocks - headroom_blocks)
        self.max_queue = max_queue
        self.max_wait_s = max_wait_s
        self.enabled = enabled
        self.in_use = 0
        self.admitted = 0
        self.rejected = 0
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    @property
    def queue_depth(self) -> int:
        return sum(1 for w in self._waiting if not w.future.done())

    @property
    def free_fraction(self) -> float:
        return max(0.0, (self.budget - self.in_use) / self.budget)

    async def acquire(self, tokens: int, priority: str = "interactive") -> Ticket:
        blocks = self.blocks_for(tokens)
        if not self.enabled:
            return Ticket(0)
        if blocks > self.budget:
            raise RequestTooLarge(
                f"the request needs {blocks} KV blocks ({tokens} tokens); this model admits at "
                f"most {self.budget} blocks ({self.budget * self.block_size} tokens)"
            )
        if not self._waiting and self.in_use + blocks <= self.budget:
            return self._grant(blocks)
        if self.queue_depth >= self.max_queue:
            self.rejected += 1
            raise AdmissionRejected(
                "the model is at capacity and its wait queue is full", retry_after_s=self._retry_after()
            )
        waiter = _Waiter(
            PRIORITIES.get(priority, 0), blocks, next(self._seq), asyncio.get_running_loop().create_future()
        )
        heapq.heappush(self._waiting, waiter)
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
        self._wake()

    def _grant(self, blocks: int) -> Ticket:
        self.in_use += blocks
        self.admitted += 1
        return Ticket(blocks)

    def _wake(self) -> None:
        while self._waiting:
            head = self._waiting[0]
            if head.future.done():
                heapq.heappop(self._waiting)
                continue
            if self.in_use + head.blocks > self.budget:
                return
            heapq.heappop(self._waiting)
            head.future.set_result(self._grant(head.blocks))

    def _retry_after(self) -> float:
        return max(1.0, min(self.max_wait_s, 2.0 + self.queue_depth * 0.5))


@dataclass
class AdmissionClock:
    """Time spent waiting for admission, for metrics."""

    started: float = field(default_factory=time.monotonic)

    def waited(self) -> float:
        return time.monotonic() - self.started
