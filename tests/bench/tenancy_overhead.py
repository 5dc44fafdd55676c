"""What tenant auth, quotas and metering add to the request path, measured side by side in one run.

Requests alternate between a tenant key (key lookup, monthly budget, TPM and concurrency reserve on Redis,
reconcile, usage row plus billing outbox) and the static admin key (constant-time compare only; no tenant,
so no quota and no outbox). Both run on the same server and engine:

    .venv/bin/python -m tests.bench.tenancy_overhead --json artifacts/tenancy_overhead.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from pathlib import Path

import httpx

from api.bench import live_server
from tests.conftest import MODELS_DIR

ADMIN = "sk-bench-admin"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    import os

    os.environ.update({"TESSERA_ADMIN_KEY": ADMIN, "TESSERA_REDIS_URL": "redis://127.0.0.1:6379/4"})
    with live_server(MODELS_DIR, {"name": "small"}, print) as base:
        admin = {"authorization": f"Bearer {ADMIN}"}
        tenant = httpx.post(
            base + "/admin/tenants", headers=admin, json={"name": f"bench-{uuid.uuid4().hex[:6]}"}
        ).json()
        key = httpx.post(f"{base}/admin/tenants/{tenant['id']}/keys", headers=admin, json={}).json()["key"]
        body = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        samples: dict[str, list[float]] = {"tenant": [], "off": []}
        pre: dict[str, list[float]] = {"tenant": [], "off": []}
        with httpx.Client(timeout=60) as http:
            for i in range(args.requests * 2 + 10):
                label, token = ("tenant", key) if i % 2 else ("off", ADMIN)
                started = time.perf_counter()
                resp = http.post(base + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {token}"})
                elapsed = time.perf_counter() - started
                resp.raise_for_status()
                if i >= 10:  # warm-up
                    samples[label].append(elapsed * 1000)
                    pre[label].append(float(resp.headers["x-tessera-pre-engine-ms"]))
    report = {
        k: {"p50_ms": round(statistics.median(v), 2), "pre_engine_p50_ms": round(statistics.median(pre[k]), 2)}
        for k, v in samples.items()
    }
    report["added_p50_ms"] = round(report["tenant"]["p50_ms"] - report["off"]["p50_ms"], 2)
    print(json.dumps(report, indent=2))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
