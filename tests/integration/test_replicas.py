"""Two gateway processes share one tenant's tokens-per-minute limit through Redis."""

from __future__ import annotations

import json
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests import openai_wire
from tests.conftest import ADMIN_KEY, MODELS_DIR, LiveServer, free_port, run_server

WINDOW_S = 5.0  # the session server runs with TESSERA_RATE_WINDOW_S=5
TPM = 1500


@pytest.fixture(scope="module")
def second_gateway(server: LiveServer):
    """Another replica: the same database, key secret and Redis; a small-only pool to start quickly."""
    port = free_port()
    data = server.log_path.parent
    env = {
        **os.environ,
        "TESSERA_PORT": str(port),
        "TESSERA_DATA_DIR": str(data),
        "TESSERA_MODELS_DIR": str(MODELS_DIR),
        "TESSERA_ADMIN_KEY": ADMIN_KEY,
        "TESSERA_REDIS_URL": "redis://127.0.0.1:6379/3",
        "TESSERA_RATE_WINDOW_S": str(WINDOW_S),
        "TESSERA_POOLS": json.dumps([{"name": "small", "kv_cache_gib": 0.25}]),
        "TESSERA_DEMO_TENANT": "",
    }
    yield from run_server(env, data / "server2.log")


def test_tpm_holds_across_two_replicas(server, second_gateway):
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    tenant = httpx.post(
        server.base_url + "/admin/tenants",
        headers=admin,
        timeout=30,
        json={"name": f"shared-{uuid.uuid4().hex[:6]}", "tokens_per_minute": TPM, "concurrent_requests": 64},
    ).json()
    key = httpx.post(f"{server.base_url}/admin/tenants/{tenant['id']}/keys", headers=admin, json={}, timeout=30).json()[
        "key"
    ]
    body = {"model": "small", "messages": [{"role": "user", "content": "Count to three."}], "max_tokens": 16}

    def one(i: int) -> tuple[float, float, int, int]:
        base = (server if i % 2 else second_gateway).v1
        sent = time.time()
        resp = openai_wire.post(
            base + "/chat/completions", json=body, timeout=60, headers={"authorization": f"Bearer {key}"}
        )
        used = resp.json()["usage"]["total_tokens"] if resp.status_code == 200 else 0
        return sent, time.time(), resp.status_code, used

    deadline = time.monotonic() + 12
    results: list[tuple[float, float, int, int]] = []
    with ThreadPoolExecutor(max_workers=8) as pool:
        while time.monotonic() < deadline and len(results) < 2000:
            results.extend(pool.map(one, range(len(results), len(results) + 16)))
    accepted = sorted((sent, got, n) for sent, got, status, n in results if status == 200)
    refused = [r for r in results if r[2] == 429]
    assert accepted
    assert refused, "the load must exceed the limit for the test to mean anything"
    assert all(r[2] in (200, 429) for r in results)
    # The server accepted each request somewhere between its send and its response. Counting only requests
    # that certainly fell inside a window gives a lower bound that cannot fail spuriously under load.
    certain = max(sum(n for s, g, n in accepted if start <= s and g < start + WINDOW_S) for start, _, _ in accepted)
    by_send = max(sum(n for s, _, n in accepted if start <= s < start + WINDOW_S) for start, _, _ in accepted)
    reservation = 60  # the prompt (~30 tokens) plus max_tokens 16, rounded up
    print(
        f"accepted {len(accepted)}, refused {len(refused)}, worst window {certain} tokens certainly accepted "
        f"({by_send} by send time), limit {TPM}"
    )
    assert certain <= TPM + reservation
