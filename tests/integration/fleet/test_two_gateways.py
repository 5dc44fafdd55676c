"""Two gateways on one database, Redis and embedding store: they share the embedding cache and a tenant's
concurrency limit."""

from __future__ import annotations

import time
import uuid

import httpx

from bench.common import png_data_url
from tests import openai_wire
from tests.conftest import ADMIN_KEY, API_KEY
from tests.integration.fleet.calls import describe_image


def test_two_gateways_share_the_embedding_cache(gateway, gateway_b):
    url = png_data_url(4242)
    body = describe_image(url, max_tokens=2)
    headers = {"authorization": f"Bearer {API_KEY}"}
    a = openai_wire.post(gateway.v1 + "/chat/completions", json=body, headers=headers, timeout=60).json()["usage"]
    b = openai_wire.post(gateway_b.v1 + "/chat/completions", json=body, headers=headers, timeout=60).json()["usage"]
    assert a["prompt_tokens_details"]["cached_image_tokens"] == 0
    assert b["prompt_tokens_details"]["image_tokens"] > 0
    assert b["prompt_tokens_details"]["cached_image_tokens"] == b["prompt_tokens_details"]["image_tokens"]


def test_two_gateways_share_the_concurrency_limit(gateway, gateway_b):
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    tenant = httpx.post(
        gateway.base_url + "/admin/tenants",
        headers=admin,
        json={"name": f"fleet-{uuid.uuid4().hex[:6]}", "concurrent_requests": 1},
        timeout=30,
    ).json()
    key = httpx.post(
        f"{gateway.base_url}/admin/tenants/{tenant['id']}/keys", headers=admin, json={}, timeout=30
    ).json()["key"]
    headers = {"authorization": f"Bearer {key}"}
    long_body = {
        "model": "small",
        "messages": [{"role": "user", "content": "Tell a story."}],
        # Long enough that it cannot finish before the probe below arrives: 400 tokens of the tiny small demo fit
        # in the socket buffers and were done (slot freed) before gateway B was asked, once, on a busy machine.
        "max_tokens": 3000,
        "ignore_eos": True,
        "stream": True,
    }
    short = {"model": "small", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    with httpx.stream("POST", gateway.v1 + "/chat/completions", json=long_body, headers=headers, timeout=120) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()  # held: a dropped iterator closes the response, which cancels the request
        next(lines)
        refused = openai_wire.post(gateway_b.v1 + "/chat/completions", json=short, headers=headers, timeout=60)
        assert refused.status_code == 429, refused.text
    deadline = time.monotonic() + 20
    status = 0
    while time.monotonic() < deadline and status != 200:
        status = openai_wire.post(
            gateway_b.v1 + "/chat/completions", json=short, headers=headers, timeout=60
        ).status_code
        time.sleep(0.3)
    assert status == 200
