"""Background work that must outlive the request that started it (usage writes, aborts, scoring)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

logger = logging.getLogger(__name__)


class BackgroundTasks:
    """Keeps a reference to every task it starts, logs their failures, and waits for them at shutdown."""

    def __init__(self) -> None:
        self._pending: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._pending.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("background task failed", exc_info=task.exception())

    async def drain(self, timeout_s: float = 10.0) -> None:
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=timeout_s)
