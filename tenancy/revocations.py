"""Key and tenant changes reach every gateway within a poll interval, through a version counter in Redis.

A gateway that revokes a key, suspends a tenant or changes a quota empties its own resolved-key cache and
increments `tessera:directory:version`. Every gateway reads the counter every `interval_s` (250 ms) and
empties its cache when the counter moved, so no gateway accepts a revoked key for longer than about one
interval. A counter rather than pub/sub: a gateway that missed messages (a Redis restart, a slow loop) still
sees that the counter differs. When Redis cannot be read, the cache lifetime (5 s) bounds the staleness.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tenancy.directory import Directory

logger = logging.getLogger(__name__)

VERSION_KEY = "tessera:directory:version"


class ChangeFeed:
    def __init__(self, url: str, directory: Directory, *, interval_s: float = 0.25, timeout_s: float = 1.0) -> None:
        import redis
        from redis.asyncio import Redis

        self._directory = directory
        self._interval = interval_s
        # Announcing runs where the change was made: on a worker thread, with a blocking client.
        self._sync: Any = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._async: Any = Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._seen: bytes | None = None
        self._read_once = False
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._timeout = timeout_s
        self.refreshes = 0  # caches emptied because another gateway announced a change

    def announce(self) -> None:
        """Tell the other gateways; a failure is logged, and their cache lifetime still bounds the delay."""
        from redis.exceptions import RedisError

        try:
            self._sync.incr(VERSION_KEY)
        except RedisError as exc:
            logger.warning("could not announce a key change to the other gateways: %s", exc)

    async def start(self) -> None:
        from redis.exceptions import RedisError

        self._directory.announce = self.announce
        try:
            await self.poll_once()
        except (RedisError, OSError) as exc:  # the loop keeps trying; limits fail closed meanwhile
            logger.warning("directory change feed: Redis unavailable at start-up: %s", exc)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def poll_once(self) -> None:
        version = await self._async.get(VERSION_KEY)  # None until the first change anywhere
        if self._read_once and version != self._seen:
            self._directory.forget(announce=False)
            self.refreshes += 1
        self._seen, self._read_once = version, True

    async def _run(self) -> None:
        from redis.exceptions import RedisError

        while not self._stopping:
            await asyncio.sleep(self._interval)
            if self._stopping:
                return
            try:
                await self.poll_once()
            except (RedisError, OSError) as exc:
                logger.debug("directory change feed: %s", exc)

    async def close(self) -> None:
        """Stop polling and close the clients. The loop is asked to stop between polls rather than cancelled: a
        Redis command cancelled while it is being written can leave its task waiting forever (seen with redis-py
        on Python 3.11, in most of 40 tries), and a server stopping would then hang until it was killed."""
        self._directory.announce = None
        self._stopping = True
        if self._task is not None:
            # a poll in flight ends within the socket timeout
            await asyncio.wait({self._task}, timeout=self._interval + 2 * self._timeout + 1.0)
            if not self._task.done():
                logger.warning("directory change feed: its poll did not stop; cancelling it")
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=1.0)
        await self._async.aclose()
        self._sync.close()
