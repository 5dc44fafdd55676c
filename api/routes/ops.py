"""Operational endpoints: /health for load balancers, /metrics for Prometheus."""

from __future__ import annotations

from typing import Any

from litestar import Response, get
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec

from serving.errors import EngineUnavailable
from serving.metrics import ServerMetrics
from serving.pools import PoolRegistry

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
_UNHEALTHY = ResponseSpec(
    dict[str, Any], description="An engine is dead: the same report, with `retry-after`.", generate_examples=False
)


@get("/health", responses={503: _UNHEALTHY})
async def health(pools: NamedDependency[PoolRegistry]) -> Response[dict[str, Any]]:
    engines: dict[str, Any] = {}
    for pool in pools.pools:
        alive = pool.engine.is_healthy()
        busy: bool | None = None
        if alive:
            try:
                busy = await pool.engine.has_work(wait_s=2.0)
            except EngineUnavailable:
                alive = False
        engines[pool.name] = {
            "status": "ok" if alive else "dead",
            "unfinished_requests": pool.engine.num_unfinished(),
            "scheduler_has_requests": busy,
        }
        if replicas := pool.engine.replicas():
            engines[pool.name]["replicas"] = replicas
    for task in pools.tasks:  # embedding and transcription pools
        engines[task.name] = {
            "status": "ok" if task.engine.is_healthy() else "dead",
            "kind": task.kind,
            "admitted": task.admission.in_use,
            "waiting": task.admission.queue_depth,
        }
        if replicas := task.engine.replicas():
            engines[task.name]["replicas"] = replicas
    ok = all(e["status"] == "ok" for e in engines.values())
    return Response(
        {"status": "ok" if ok else "unavailable", "engines": engines},
        status_code=200 if ok else 503,
        headers={} if ok else {"retry-after": "10"},
    )


@get("/metrics", sync_to_thread=False, media_type=PROMETHEUS_TEXT)
def metrics(server_metrics: NamedDependency[ServerMetrics]) -> Response[bytes]:
    return Response(server_metrics.render(), media_type=PROMETHEUS_TEXT)
