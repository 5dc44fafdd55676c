"""Operational endpoints: /health for load balancers, /metrics for Prometheus."""

from __future__ import annotations

from typing import Any

from litestar import Response, get

from api.metrics import ServerMetrics
from serving.pools import PoolRegistry


@get("/health", sync_to_thread=False)
def health(pools: PoolRegistry) -> Response[dict[str, Any]]:
    engines = {p.name: "ok" if p.engine.is_healthy() else "dead" for p in pools.pools}
    ok = all(v == "ok" for v in engines.values())
    return Response({"status": "ok" if ok else "unavailable", "engines": engines}, status_code=200 if ok else 503,
                    headers={} if ok else {"retry-after": "10"})


@get("/metrics", sync_to_thread=False)
def metrics(server_metrics: ServerMetrics) -> Response[bytes]:
    return Response(server_metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
