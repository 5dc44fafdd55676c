"""The admin overview's live figures: the last minute's rate and TTFT per pool, each pool's KV budget and queues,
its replicas, and the embedding cache's hit rate."""

from __future__ import annotations

from typing import Any

from serving.encoders.cache import EmbeddingCache
from serving.metrics import ServerMetrics
from serving.pools import PoolRegistry, encoding_places


def live_figures(metrics: ServerMetrics, pools: PoolRegistry, cache: EmbeddingCache | None) -> dict[str, Any]:
    """What the overview shows, as of now: the last minute's rate and TTFT, and the pools' current state: the chat
    pools' KV cache, and the embedding and transcription pools' slots (each request holds one while it runs)."""
    live = metrics.live.snapshot()
    rows = []
    for pool in pools.pools:
        recent = live["pools"].get(pool.name, {})
        stats = pool.engine.stats
        rows.append(
            {
                "name": pool.name,
                "architecture": pool.architecture,
                "encoding": encoding_places(pool),
                "up": pool.engine.is_healthy(),
                "rps": recent.get("rps", 0.0),
                "ttft_p50_ms": recent.get("ttft_p50_ms"),
                "ttft_p99_ms": recent.get("ttft_p99_ms"),
                "kv_usage": stats.kv_cache_usage,
                "kv_admitted": pool.admission.in_use,
                "kv_budget": pool.admission.budget,
                "queue": pool.admission.queue_depth,
                "engine_waiting": stats.waiting,
                "running": stats.running,
            }
        )
    tasks = [
        {
            "name": task.name,
            "kind": task.kind,
            "up": task.engine.is_healthy(),
            "rps": live["pools"].get(task.name, {}).get("rps", 0.0),
            "in_use": task.admission.in_use,
            "slots": task.admission.budget,
            "queue": task.admission.queue_depth,
        }
        for task in pools.tasks
    ]
    hits = misses = 0
    if cache is not None:
        for outcomes in cache.stats.by_kind.values():
            hits += outcomes.get("hit", 0)
            misses += outcomes.get("miss", 0)
    return {
        "span_s": live["span_s"],
        "rps": live["rps"],
        "pools": rows,
        "tasks": tasks,
        "replicas": [
            {"pool": name, **r}
            for name, engine in [(p.name, p.engine) for p in pools.pools] + [(t.name, t.engine) for t in pools.tasks]
            for r in engine.replicas()
        ],
        "queue": sum(r["queue"] + r["engine_waiting"] for r in rows) + sum(t["queue"] for t in tasks),
        "cache_enabled": cache is not None,
        "cache_lookups": hits + misses,
        "cache_hit_rate": (hits / (hits + misses)) if hits + misses else None,
    }
