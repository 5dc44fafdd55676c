"""The endpoint picker of a model pool served by remote vLLM replicas: scraping, ejection and choice.

Each replica's own `/metrics` is scraped in the background; a replica that fails a scrape or a request is
ejected at once and readmitted only when its `/health` answers 200 after an exponential backoff. The choice
itself is pure policy over the replicas' current state (`least_loaded`, `bounded_affinity`): requests that
share an affinity key (a tenant, a conversation, a shared prefix) go to the same replica, so its prefix cache
keeps paying, unless that replica carries more than its bounded share of the pool's load.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from serving.engines.replica_metrics import ReplicaMetrics, parse_vllm_metrics
from serving.errors import EngineUnavailable

logger = logging.getLogger(__name__)

Policy = Literal["picker", "round_robin"]

AFFINITY_SLACK = 1.0  # a key's replica is followed while it carries at most one request more than the idlest
SLOW_SCRAPES_TO_EJECT = 3  # a busy replica may answer /metrics late; a dead one refuses at once
KV_WEIGHT = 4.0  # a full KV cache weighs as much as four queued requests: the next one preempts or waits
MAX_SCRAPE_BYTES = 8 << 20  # vLLM's /metrics is a few hundred KB with every histogram


@dataclass
class Replica:
    """One `vllm serve` replica of a pool, as this gateway sees it."""

    url: str  # base URL without a trailing slash
    name: str  # host:port
    state: Literal["up", "ejected"] = "up"
    metrics: ReplicaMetrics | None = None
    in_flight: int = 0  # requests this gateway has on it right now
    failures: int = 0  # consecutive failures: the one that ejected it, then failed /health probes
    slow_scrapes: int = 0  # consecutive /metrics scrapes that timed out while up
    own_at_scrape: int = 0  # our in-flight requests when the last scrape was taken
    ejected_at: float = 0.0
    ejected_until: float = 0.0  # the next /health probe is due then
    backoff_s: float = 0.0  # 0 while up
    picks: int = 0
    affinity_picks: int = 0  # picks that went to the affinity key's first choice

    @classmethod
    def at(cls, url: str) -> Replica:
        base = url.rstrip("/")
        parsed = httpx.URL(base)
        return cls(url=base, name=f"{parsed.host}:{parsed.port or (443 if parsed.scheme == 'https' else 80)}")

    def load(self) -> float:
        """`in_flight + (running - own_at_scrape) + waiting + 4 * kv_cache_usage`.

        `in_flight` is this gateway's own count and exact at once. The scrape lags by up to an interval, so
        its `running` also counts requests of ours that have finished since: only what it ran beyond our own
        in-flight requests at scrape time (`own_at_scrape`) is other gateways' work. Queued requests count
        again, because a new request waits behind them; the KV term separates replicas whose queues are equal
        and shies away from a nearly full cache, where vLLM preempts. Without a scrape, the load is `in_flight`.
        """
        m = self.metrics
        if m is None:
            return float(self.in_flight)
        return self.in_flight + max(0, m.running - self.own_at_scrape) + m.waiting + KV_WEIGHT * m.kv_cache_usage


def rendezvous_weight(key: str, url: str) -> int:
    """Highest-random-weight hash of (key, replica): stable across processes, unlike `hash()`."""
    digest = hashlib.blake2b(f"{key}\x00{url}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def least_loaded(candidates: Sequence[Replica]) -> Replica:
    """The lowest `load()`; ties go to the replica picked least so far, then to the first listed."""
    return min(candidates, key=lambda r: (r.load(), r.picks))


def bounded_affinity(
    key: str, candidates: Sequence[Replica], load_bound: float, slack: float = AFFINITY_SLACK
) -> tuple[Replica, bool]:
    """Consistent hashing with bounded loads: the key's replicas in rendezvous order, and the first whose load
    is at most `load_bound * (total load + 1) / n` and at most `slack` above the least-loaded replica's.
    Returns the replica and whether it is the first choice.

    The slack matters on small pools: with two replicas the bound alone lets one carry 1.67 times the
    other's load plus one, and on replicas that run one sequence at a time every stacked request waits."""
    loads = {r.url: r.load() for r in candidates}
    bound = min(load_bound * (sum(loads.values()) + 1) / len(candidates), min(loads.values()) + slack)
    ranked = sorted(candidates, key=lambda r: rendezvous_weight(key, r.url), reverse=True)
    for replica in ranked:
        if loads[replica.url] <= bound:
            return replica, replica is ranked[0]
    return least_loaded(candidates), False


class _ProbeFailed(Exception):
    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class EndpointPicker:
    """Picks a replica of one pool per request, and keeps each replica's state from its `/metrics`."""

    def __init__(
        self,
        pool: str,
        urls: Sequence[str],
        client: httpx.AsyncClient,
        *,
        policy: Policy = "picker",
        scrape_interval_s: float = 0.25,
        scrape_timeout_s: float = 1.0,
        load_bound: float = 1.25,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 8.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.replicas = [Replica.at(u) for u in urls]
        if not self.replicas or len({r.url for r in self.replicas}) != len(self.replicas):
            raise ValueError(f"pool {pool}: replica URLs must be given, each once")
        if min(scrape_interval_s, scrape_timeout_s, load_bound, backoff_initial_s) <= 0:
            raise ValueError(f"pool {pool}: intervals, timeouts and the load bound must be positive")
        self.pool = pool
        self.policy = policy
        self._client = client
        self._interval = scrape_interval_s
        self._timeout = scrape_timeout_s
        self._load_bound = load_bound
        self._backoff_initial = backoff_initial_s
        self._backoff_max = max(backoff_max_s, backoff_initial_s)
        self._clock = clock
        self._next = 0  # round robin's position in `replicas`
        self._watchers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Scrapes every replica once, so capacity is known, then watches each one in the background."""
        if self._watchers:
            return
        await self.scrape_once()
        self._watchers = [
            asyncio.create_task(self._watch(r), name=f"fleet:{self.pool}:{r.name}") for r in self.replicas
        ]

    async def close(self) -> None:
        watchers, self._watchers = self._watchers, []
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)

    async def scrape_once(self) -> None:
        """One round: `/metrics` of every up replica, `/health` of every ejected one whose backoff is over."""
        results = await asyncio.gather(*(self._check(r) for r in self.replicas), return_exceptions=True)
        for replica, result in zip(self.replicas, results, strict=True):
            if isinstance(result, Exception):
                logger.error("pool %s: checking replica %s failed", self.pool, replica.name, exc_info=result)

    def pick(self, affinity: str | None, exclude: Collection[str] = ()) -> Replica:
        """An up replica whose URL is not in `exclude` (the replicas a retried request already failed on)."""
        candidates = [r for r in self.replicas if r.state == "up" and r.url not in exclude]
        if not candidates:
            raise EngineUnavailable(f"no replica of the model '{self.pool}' is available", retry_after_s=1.0)
        if self.policy == "round_robin":
            chosen = self._round_robin(candidates)
        elif affinity is None:
            chosen = least_loaded(candidates)
        else:
            chosen, first_choice = bounded_affinity(affinity, candidates, self._load_bound)
            if first_choice:
                chosen.affinity_picks += 1
        chosen.picks += 1
        return chosen

    @contextlib.contextmanager
    def lease(self, replica: Replica) -> Iterator[None]:
        """Counts a request on `replica` for as long as the block runs, however it leaves."""
        replica.in_flight += 1
        try:
            yield
        finally:
            replica.in_flight -= 1

    def report_failure(self, replica: Replica, reason: str) -> None:
        """A request failed on `replica` (connection error, timeout, 5xx): eject it now. Failures of requests
        already running there when it was ejected are the same outage and change nothing."""
        if replica.state == "ejected":
            return
        now = self._clock()
        replica.state, replica.failures, replica.backoff_s = "ejected", 1, self._backoff_initial
        replica.slow_scrapes = 0
        replica.ejected_at, replica.ejected_until = now, now + replica.backoff_s
        logger.warning("pool %s: replica %s ejected for %.1fs: %s", self.pool, replica.name, replica.backoff_s, reason)

    def report_success(self, replica: Replica) -> None:
        if replica.state == "up":
            replica.failures = 0

    def capacity_blocks(self) -> tuple[int, int] | None:
        """(KV blocks, block size) over the replicas that have reported their cache; None if none has. Block
        sizes that differ are reconciled in tokens and expressed in the smallest."""
        sized = [
            (r.metrics.num_gpu_blocks, r.metrics.block_size)
            for r in self.replicas
            if r.metrics is not None and r.metrics.num_gpu_blocks is not None and r.metrics.block_size
        ]
        if not sized:
            return None
        block_size = min(size for _, size in sized)
        return sum(blocks * size for blocks, size in sized) // block_size, block_size

    def snapshot(self) -> list[dict[str, Any]]:
        now = self._clock()
        rows = []
        for r in self.replicas:
            m = r.metrics or ReplicaMetrics()
            rows.append(
                {
                    "name": r.name,
                    "url": r.url,
                    "state": r.state,
                    "in_flight": r.in_flight,
                    "running": m.running,
                    "waiting": m.waiting,
                    "kv_cache_usage": m.kv_cache_usage,
                    "prefix_cache_hit_rate": m.prefix_cache_hit_rate,
                    "picks": r.picks,
                    "affinity_picks": r.affinity_picks,
                    "ejected_for_s": now - r.ejected_at if r.state == "ejected" else None,
                }
            )
        return rows

    def _round_robin(self, candidates: Sequence[Replica]) -> Replica:
        eligible = {r.url for r in candidates}
        for step in range(len(self.replicas)):
            index = (self._next + step) % len(self.replicas)
            if self.replicas[index].url in eligible:
                self._next = index + 1
                return self.replicas[index]
        raise AssertionError("candidates are drawn from the replicas")  # pragma: no cover

    async def _watch(self, replica: Replica) -> None:
        # One watcher per replica, so a replica that hangs until the timeout delays no other's ejection.
        while True:
            began = self._clock()
            try:
                await self._check(replica)
            except Exception:
                logger.exception("pool %s: checking replica %s failed", self.pool, replica.name)
            await asyncio.sleep(max(0.0, self._interval - (self._clock() - began)))

    async def _check(self, replica: Replica) -> None:
        if replica.state == "up":
            await self._scrape(replica)
        elif self._clock() >= replica.ejected_until:
            await self._probe(replica)

    async def _scrape(self, replica: Replica) -> None:
        """A refused connection or an error status ejects at once; a late answer only after
        `SLOW_SCRAPES_TO_EJECT` in a row (a busy replica answers late; a hung one never does), and never when it
        is the pool's last replica up: a slow answer still beats none, and a hung replica fails its requests,
        which eject it."""
        own_before = replica.in_flight
        try:
            text = await self._get(replica.url + "/metrics")
        except _ProbeFailed as exc:
            if exc.timed_out:
                replica.slow_scrapes += 1
                if replica.slow_scrapes < SLOW_SCRAPES_TO_EJECT:
                    return
                if not any(r.state == "up" for r in self.replicas if r is not replica):
                    if replica.slow_scrapes == SLOW_SCRAPES_TO_EJECT:
                        logger.warning(
                            "pool %s: replica %s answers /metrics late (%s), but it is the last one up: kept",
                            self.pool, replica.name, exc,
                        )  # fmt: skip
                    return
            self.report_failure(replica, f"/metrics: {exc}")
            return
        replica.slow_scrapes = 0
        replica.metrics = parse_vllm_metrics(text, self._clock())
        # Ours, as the replica counted them: in flight when the scrape left or when it came back.
        replica.own_at_scrape = max(own_before, replica.in_flight)

    async def _probe(self, replica: Replica) -> None:
        # Readmission wants a fresh /metrics too: a replica whose /health answers but whose /metrics does not
        # would otherwise flap in and out at the initial backoff.
        try:
            await self._get(replica.url + "/health")
            text = await self._get(replica.url + "/metrics")
        except _ProbeFailed as exc:
            replica.failures += 1
            replica.backoff_s = min(replica.backoff_s * 2, self._backoff_max)
            replica.ejected_until = self._clock() + replica.backoff_s
            logger.debug("pool %s: replica %s still down (%s)", self.pool, replica.name, exc)
            return
        replica.metrics = parse_vllm_metrics(text, self._clock())
        replica.own_at_scrape = replica.in_flight
        replica.state, replica.failures, replica.backoff_s, replica.ejected_until = "up", 0, 0.0, 0.0
        logger.info("pool %s: replica %s readmitted", self.pool, replica.name)

    async def _get(self, url: str) -> str:
        """The body of a 200 answer, within the timeout and the byte cap; anything else raises _ProbeFailed."""
        try:
            async with asyncio.timeout(self._timeout):
                return await self._read(url)
        except (TimeoutError, httpx.TimeoutException):
            raise _ProbeFailed(f"no answer within {self._timeout}s", timed_out=True) from None
        except httpx.HTTPError as exc:
            raise _ProbeFailed(f"{type(exc).__name__}: {exc}") from None

    async def _read(self, url: str) -> str:
        async with self._client.stream("GET", url, timeout=self._timeout) as resp:
            if resp.status_code != 200:
                raise _ProbeFailed(f"HTTP {resp.status_code}")
            body = bytearray()
            async for chunk in resp.aiter_bytes():
                body += chunk
                if len(body) > MAX_SCRAPE_BYTES:
                    raise _ProbeFailed(f"answer over {MAX_SCRAPE_BYTES} bytes")
            return body.decode("utf-8", errors="replace")
