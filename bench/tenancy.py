"""`tessera bench tenancy`: what tenant auth, quotas and metering add to the request path, side by side."""

from __future__ import annotations

import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.common import BenchFailure, Progress, check_report, stamp, write_report
from bench.server import BENCH_CONCURRENT_REQUESTS, BENCH_TOKENS_PER_MINUTE, LiveServer, live_server
from config.settings import Settings

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/4"


def _require_redis(url: str) -> None:
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        raise BenchFailure(f"the tenancy bench keeps its limits on Redis, and {url} does not answer: {exc}") from exc


def _tenant_key(server: LiveServer) -> str:
    """A fresh tenant (limits no bench reaches) and a key of its own, through the admin API."""
    with httpx.Client(base_url=server.base, headers=server.admin_headers, timeout=30) as http:
        created = http.post(
            "/admin/tenants",
            json={
                "name": f"bench-{uuid.uuid4().hex[:6]}",
                "tokens_per_minute": BENCH_TOKENS_PER_MINUTE,
                "concurrent_requests": BENCH_CONCURRENT_REQUESTS,
            },
        )
        if created.status_code != 201:
            raise BenchFailure(f"POST /admin/tenants answered {created.status_code}: {created.text[:300]}")
        issued = http.post(f"/admin/tenants/{created.json()['id']}/keys", json={})
        if issued.status_code != 201:
            raise BenchFailure(f"POST .../keys answered {issued.status_code}: {issued.text[:300]}")
        return str(issued.json()["key"])


def _sample(server: LiveServer, tenant_key: str, requests: int, warmup: int) -> dict[str, dict[str, list[float]]]:
    body = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    samples: dict[str, dict[str, list[float]]] = {"tenant": {"ms": [], "pre": []}, "off": {"ms": [], "pre": []}}
    with httpx.Client(timeout=60) as http:
        for i in range(requests * 2 + warmup):
            label, token = ("tenant", tenant_key) if i % 2 else ("off", server.admin_key)
            started = time.perf_counter()
            resp = http.post(
                server.base + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {token}"}
            )
            elapsed = time.perf_counter() - started
            if resp.status_code != 200:
                raise BenchFailure(f"{label} request answered {resp.status_code}: {resp.text[:300]}")
            if i >= warmup:
                samples[label]["ms"].append(elapsed * 1000)
                pre = resp.headers.get("x-tessera-pre-engine-ms")
                if pre is None:
                    raise BenchFailure("the response has no x-tessera-pre-engine-ms header")
                samples[label]["pre"].append(float(pre))
    return samples


def run_tenancy_bench(
    out: Path,
    settings: Settings,
    smoke: bool = False,
    requests: int | None = None,
    redis_url: str = DEFAULT_REDIS_URL,
    progress: Progress = print,
) -> dict[str, Any]:
    """Requests alternate between a tenant key (key lookup, monthly budget, TPM and concurrency reserve on
    Redis, reconcile, usage row plus billing outbox) and the static admin key (constant-time compare only; no
    tenant, so no quota and no outbox), on the same server and engine. Writes p50s of both to `out`."""
    from demo.checkpoints import build_demo_checkpoints

    report: dict[str, Any] = stamp(smoke)
    requests = requests or (5 if smoke else 100)
    warmup = 2 if smoke else 10
    _require_redis(redis_url)
    build_demo_checkpoints(settings.demo_dir(), ["small"], progress=progress)
    progress(f"starting the live server (pool small, limits on Redis at {redis_url})")
    with live_server(settings.demo_dir(), {"name": "small"}, progress, env={"TESSERA_REDIS_URL": redis_url}) as server:
        samples = _sample(server, _tenant_key(server), requests, warmup)
        startup_s = server.startup_s
    report.update({"requests": requests, "server_startup_s": round(startup_s, 1)})
    for label, got in samples.items():
        report[label] = {
            "p50_ms": round(statistics.median(got["ms"]), 2),
            "pre_engine_p50_ms": round(statistics.median(got["pre"]), 2),
        }
        got_ms = report[label]
        progress(f"  {label:6s}: p50 {got_ms['p50_ms']:.1f} ms, pre-engine {got_ms['pre_engine_p50_ms']:.1f} ms")
    report["added_p50_ms"] = round(report["tenant"]["p50_ms"] - report["off"]["p50_ms"], 2)
    progress(f"  tenancy adds {report['added_p50_ms']:.2f} ms at p50")
    check_report(
        report,
        positive=["tenant.p50_ms", "off.p50_ms"],
        non_negative=["tenant.pre_engine_p50_ms", "off.pre_engine_p50_ms"],
    )
    write_report(out, report)
    progress(f"wrote {out}")
    return report
