"""Prometheus metrics of serving: latency histograms, request and token counts, and live engine state.

`ServerMetrics.record_completion` subscribes to completion records; the collector reads the pools live.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from serving.encoders.cache import EmbeddingCache
from serving.pools import ModelPool, PoolRegistry, TaskPool
from serving.record import CompletionRecord

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
_ITL_BUCKETS = (0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)


class _EngineCollector(Collector):
    def __init__(self, pools: PoolRegistry, cache: EmbeddingCache | None) -> None:
        self._pools = pools
        self._cache = cache

    def _pipeline(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        queue = GaugeMetricFamily(
            "tessera_admission_queue_depth", "Requests waiting for KV capacity.", labels=["model"]
        )
        held = GaugeMetricFamily(
            "tessera_admission_blocks_in_use", "KV blocks held by admitted requests.", labels=["model"]
        )
        budget = GaugeMetricFamily(
            "tessera_admission_blocks_budget", "KV blocks admission may hand out.", labels=["model"]
        )
        rejected = CounterMetricFamily("tessera_admission_rejected", "Requests refused for capacity.", labels=["model"])
        enc_items = CounterMetricFamily("tessera_encoder_items", "Media items encoded.", labels=["model", "kind"])
        enc_batches = CounterMetricFamily(
            "tessera_encoder_batches", "Encoder forward passes.", labels=["model", "kind"]
        )
        enc_seconds = CounterMetricFamily("tessera_encoder_seconds", "Time spent encoding.", labels=["model", "kind"])
        enc_fail = CounterMetricFamily(
            "tessera_encoder_failures", "Encoder failures by reason.", labels=["model", "kind", "reason"]
        )
        # Chat pools count KV blocks; embedding and transcription pools, slots of their concurrency budget.
        admitting: list[ModelPool | TaskPool] = [*self._pools.pools, *self._pools.tasks]
        for any_pool in admitting:
            queue.add_metric([any_pool.name], any_pool.admission.queue_depth)
            held.add_metric([any_pool.name], any_pool.admission.in_use)
            budget.add_metric([any_pool.name], any_pool.admission.budget)
            rejected.add_metric([any_pool.name], any_pool.admission.rejected)
        for pool in self._pools.pools:
            if pool.vision is not None:
                st = pool.vision.stats
                enc_items.add_metric([pool.name, "image"], st.items)
                enc_batches.add_metric([pool.name, "image"], st.batches)
                enc_seconds.add_metric([pool.name, "image"], st.seconds)
                for reason, n in st.failures.items():
                    enc_fail.add_metric([pool.name, "image", reason], n)
        yield from (queue, held, budget, rejected, enc_items, enc_batches, enc_seconds, enc_fail)
        if self._cache is not None:
            lookups = CounterMetricFamily(
                "tessera_embedding_cache_lookups", "Embedding cache lookups by outcome.", labels=["kind", "outcome"]
            )
            for kind, outcomes in self._cache.stats.by_kind.items():
                for outcome, n in outcomes.items():
                    lookups.add_metric([kind, outcome], n)
            corrupt = CounterMetricFamily("tessera_embedding_cache_corrupt", "Entries found corrupt and replaced.")
            corrupt.add_metric([], self._cache.stats.corrupt)
            mem = GaugeMetricFamily("tessera_embedding_cache_memory_bytes", "Bytes in the in-memory tier.")
            mem.add_metric([], self._cache.memory_bytes())
            yield from (lookups, corrupt, mem)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        up = GaugeMetricFamily("tessera_engine_up", "1 while the pool's engine is alive.", labels=["model"])
        unfinished = GaugeMetricFamily(
            "tessera_engine_unfinished_requests", "Requests the engine client still tracks.", labels=["model"]
        )
        running = GaugeMetricFamily(
            "tessera_engine_running_requests", "Requests the engine scheduler is running.", labels=["model"]
        )
        waiting = GaugeMetricFamily(
            "tessera_engine_waiting_requests", "Requests waiting in the engine scheduler.", labels=["model"]
        )
        kv = GaugeMetricFamily("tessera_engine_kv_cache_usage_ratio", "Fraction of KV blocks in use.", labels=["model"])
        blocks = GaugeMetricFamily("tessera_engine_kv_cache_blocks", "KV blocks the engine owns.", labels=["model"])
        preempt = CounterMetricFamily("tessera_engine_preemptions", "Sequences the engine preempted.", labels=["model"])
        for pool in self._pools.pools:
            engine = pool.engine
            up.add_metric([pool.name], 1.0 if engine.is_healthy() else 0.0)
            unfinished.add_metric([pool.name], engine.num_unfinished())
            running.add_metric([pool.name], engine.stats.running)
            waiting.add_metric([pool.name], engine.stats.waiting)
            kv.add_metric([pool.name], engine.stats.kv_cache_usage)
            blocks.add_metric([pool.name], engine.capacity.num_blocks)
            preempt.add_metric([pool.name], engine.stats.preemptions_total)
        for task in self._pools.tasks:
            up.add_metric([task.name], 1.0 if task.engine.is_healthy() else 0.0)
        yield from (up, unfinished, running, waiting, kv, blocks, preempt)
        yield from self._replicas()
        yield from self._pipeline()

    def _replicas(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """Each remote replica's state as the endpoint picker sees it."""
        labels = ["model", "replica"]
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            "up": GaugeMetricFamily(
                "tessera_replica_up", "1 while the replica is admitted, 0 while ejected.", labels=labels
            ),
            "in_flight": GaugeMetricFamily(
                "tessera_replica_in_flight_requests", "Requests this gateway has on the replica.", labels=labels
            ),
            "kv_cache_usage": GaugeMetricFamily(
                "tessera_replica_kv_cache_usage_ratio", "The replica's KV cache in use, as it reports.", labels=labels
            ),
            "waiting": GaugeMetricFamily(
                "tessera_replica_waiting_requests", "Requests waiting in the replica's scheduler.", labels=labels
            ),
            "picks": CounterMetricFamily("tessera_replica_picks", "Requests sent to the replica.", labels=labels),
            "affinity_picks": CounterMetricFamily(
                "tessera_replica_affinity_picks",
                "Requests sent to the replica as their affinity's first choice.",
                labels=labels,
            ),
        }
        pools: list[ModelPool | TaskPool] = [*self._pools.pools, *self._pools.tasks]
        for pool in pools:
            for r in pool.engine.replicas():
                key = [pool.name, str(r["name"])]
                families["up"].add_metric(key, 1.0 if r["state"] == "up" else 0.0)
                for name in ("in_flight", "kv_cache_usage", "waiting", "picks", "affinity_picks"):
                    families[name].add_metric(key, float(r.get(name) or 0))
        yield from families.values()


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class LiveWindow:
    """The last minute of finished requests, for the admin overview: rate and TTFT quantiles per pool.

    Prometheus histograms hold totals since start; an operator watching the console wants "now"."""

    def __init__(self, span_s: float = 60.0, max_events: int = 100_000) -> None:
        self.span_s = span_s
        self._events: deque[tuple[float, str, float | None]] = deque(maxlen=max_events)
        self._lock = threading.Lock()

    def finished(self, pool: str, ttft_s: float | None) -> None:
        with self._lock:
            self._events.append((time.monotonic(), pool, ttft_s))

    def snapshot(self) -> dict[str, Any]:
        since = time.monotonic() - self.span_s
        with self._lock:
            while self._events and self._events[0][0] < since:
                self._events.popleft()
            events = list(self._events)
        pools: dict[str, dict[str, Any]] = {}
        for _, pool, ttft in events:
            entry = pools.setdefault(pool, {"requests": 0, "ttfts": []})
            entry["requests"] += 1
            if ttft is not None:
                entry["ttfts"].append(ttft)
        return {
            "span_s": self.span_s,
            "rps": len(events) / self.span_s,
            "pools": {
                name: {
                    "rps": e["requests"] / self.span_s,
                    "ttft_p50_ms": None if (v := _quantile(e["ttfts"], 0.5)) is None else v * 1000,
                    "ttft_p99_ms": None if (v := _quantile(e["ttfts"], 0.99)) is None else v * 1000,
                }
                for name, e in pools.items()
            },
        }


class ServerMetrics:
    """One registry per app, so several apps in one process never collide."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.live = LiveWindow()
        self.ttft = Histogram(
            "tessera_time_to_first_token_seconds",
            "Time to first token, by model and the request's modality mix.",
            ["model", "modalities"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.itl = Histogram(
            "tessera_inter_token_latency_seconds",
            "Time between streamed tokens, by model and modality mix.",
            ["model", "modalities"],
            buckets=_ITL_BUCKETS,
            registry=self.registry,
        )
        self.e2e = Histogram(
            "tessera_e2e_request_latency_seconds",
            "Request latency, end to end, by model and modality mix.",
            ["model", "modalities"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.pre_engine = Histogram(
            "tessera_pre_engine_seconds",
            "Time from receipt to engine submission: parse, media, admission, encoders.",
            ["model", "modalities"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.admission_wait = Histogram(
            "tessera_admission_wait_seconds",
            "Time a request waited for its pool's admission (KV blocks, or a slot of an embedding or transcription "
            "pool), by priority class.",
            ["model", "priority"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.encode_seconds = Histogram(
            "tessera_encode_seconds",
            "Time to encode a request's media of one kind (after decoding), by medium and whether the embedding "
            "cache answered for any of them (hit) or none (miss).",
            ["model", "medium", "cache"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            "tessera_requests",
            "Chat completion requests by model, modality mix and outcome.",
            ["model", "modalities", "status"],
            registry=self.registry,
        )
        self.prompt_tokens = Counter(
            "tessera_prompt_tokens", "Prompt tokens by modality.", ["model", "modality"], registry=self.registry
        )
        self.completion_tokens = Counter(
            "tessera_completion_tokens", "Completion tokens.", ["model"], registry=self.registry
        )
        self.endpoint_requests = Counter(
            "tessera_endpoint_requests",
            "Requests that reached an engine (or the transcription results cache), by endpoint, model and outcome.",
            ["endpoint", "model", "status"],
            registry=self.registry,
        )
        self.endpoint_latency = Histogram(
            "tessera_endpoint_latency_seconds",
            "Request latency, end to end, by endpoint (embeddings and transcriptions share it with chat).",
            ["endpoint", "model"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.audio_seconds = Counter(
            "tessera_transcribed_audio_seconds",
            "Seconds of audio transcribed or translated, by model and whether the results cache answered.",
            ["model", "cached"],
            registry=self.registry,
        )
        self.refused = Counter(
            "tessera_refused_requests",
            "Requests refused before the engine, by error code.",
            ["code"],
            registry=self.registry,
        )

    def record_completion(self, record: CompletionRecord) -> None:
        """The metrics subscriber of the completion bus."""
        model = record.model
        self.endpoint_requests.labels(record.endpoint, model, record.status).inc()
        self.endpoint_latency.labels(record.endpoint, model).observe(record.total_s)
        if record.endpoint != "chat":
            self.live.finished(model, None)  # a request the pool served: it counts in the overview's rate
            usage = record.usage
            if usage.audio_ms:
                cached = min(usage.cached_audio_ms, usage.audio_ms)
                self.audio_seconds.labels(model, "false").inc((usage.audio_ms - cached) / 1000)
                self.audio_seconds.labels(model, "true").inc(cached / 1000)
            if usage.text:
                self.prompt_tokens.labels(model, "text").inc(usage.text)
            return
        mix = modality_mix(record.modalities)
        if record.ttft_s is not None:
            self.ttft.labels(model, mix).observe(record.ttft_s)
        itl = self.itl.labels(model, mix)
        for gap, tokens in record.token_gaps:
            for _ in range(tokens):
                itl.observe(gap / tokens)
        self.e2e.labels(model, mix).observe(record.total_s)
        self.live.finished(model, record.ttft_s)
        self.requests.labels(model, mix, record.status).inc()
        usage = record.usage
        for modality, count in (("text", usage.text), ("image", usage.image), ("audio", usage.audio)):
            if count:
                self.prompt_tokens.labels(model, modality).inc(count)
        self.completion_tokens.labels(model).inc(usage.completion)

    def attach_pools(self, pools: PoolRegistry, cache: EmbeddingCache | None = None) -> None:
        self.registry.register(_EngineCollector(pools, cache))

    def render(self) -> bytes:
        return generate_latest(self.registry)


def modality_mix(modalities: Iterable[str]) -> str:
    present = set(modalities)
    return "+".join(m for m in ("text", "image", "audio") if m in present)
