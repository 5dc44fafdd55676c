"""Prefix-cache salting on the live server: the playground and the API are the same caller, so a tenant's
prompts are cached for that tenant across both, and never reported as cached to another tenant."""

from __future__ import annotations

import json
import uuid

import httpx

from tests import openai_wire
from tests.conftest import ADMIN_KEY

ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


def _tenant_key(server) -> str:
    def admin(path: str, body: dict) -> dict:
        resp = httpx.post(server.base_url + path, json=body, headers=ADMIN, timeout=30)
        assert resp.status_code == 201, resp.text
        return resp.json()

    tenant = admin("/admin/tenants", {"name": f"salt-{uuid.uuid4().hex[:8]}", "tokens_per_minute": 10**6})
    return admin(f"/admin/tenants/{tenant['id']}/keys", {})["key"]


def _system_prompt() -> str:
    """About 450 tokens, new for each test run, so nothing is cached before the test sends it."""
    nonce = uuid.uuid4().hex
    sentence = "The harbour office keeps the tide tables, the pilot roster and the berth plan for every vessel."
    return f"Run {nonce}. " + " ".join([sentence] * 22)


def _api_cached_tokens(server, key: str, system: str) -> int:
    client = openai_wire.openai_client(server.v1, key, timeout=120)
    resp = client.chat.completions.create(
        model="small",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
        max_tokens=2,
    )
    assert resp.usage.prompt_tokens > 400
    return resp.usage.prompt_tokens_details.cached_tokens


def _playground_cached_tokens(server, key: str, system: str) -> int:
    with httpx.Client(base_url=server.base_url, timeout=120) as http:
        http.get("/console/signin")
        token = http.cookies["csrftoken"]
        signed = http.post("/console/signin", data={"api_key": key, "_csrf_token": token})
        assert signed.status_code in (200, 302, 303), signed.text
        form = {"model": "small", "system": system, "text": "hi", "max_tokens": "2", "temperature": "0"}
        multipart = {"images": ("", b"")}  # an empty file field, as a browser's form sends one
        resp = http.post("/console/playground/run", data=form, files=multipart, headers={"x-csrftoken": token})
        assert resp.status_code == 200, resp.text
        events = [line.removeprefix("data: ") for line in resp.text.splitlines() if line.startswith("data: {")]
        usage = [json.loads(e)["usage"] for e in events if json.loads(e).get("usage")]
    assert usage, resp.text
    assert usage[-1]["prompt_tokens"] > 400
    return int(usage[-1]["prompt_tokens_details"]["cached_tokens"])


def test_tenants_never_share_prefix_cache_through_the_playground_or_the_api(server):
    system = _system_prompt()
    key_a, key_b, key_c = _tenant_key(server), _tenant_key(server), _tenant_key(server)
    assert _playground_cached_tokens(server, key_a, system) == 0  # the first to send it
    # Same tenant, other door: the playground salted its prompt as this tenant's, so the API finds it cached.
    assert _api_cached_tokens(server, key_a, system) >= 384
    # Other tenants, through either door, never see another tenant's prompt as cached.
    assert _api_cached_tokens(server, key_b, system) == 0
    assert _playground_cached_tokens(server, key_c, system) == 0
    assert _playground_cached_tokens(server, key_b, system) >= 384  # b's own prompt, sent once already


def test_embedding_cache_hits_are_a_tenants_own(server):
    """Another tenant's request for the same image is encoded again, and never reported as cached."""
    from bench.common import png_data_url

    url = png_data_url(int(uuid.uuid4().hex[:6], 16))

    def cached_image_tokens(key: str) -> tuple[int, int]:
        client = openai_wire.openai_client(server.v1, key, timeout=120)
        resp = client.chat.completions.create(
            model="small",
            messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}],
            max_tokens=2,
        )
        details = resp.usage.prompt_tokens_details
        return details.image_tokens, details.model_extra["cached_image_tokens"]

    a, b = _tenant_key(server), _tenant_key(server)
    image_tokens, first = cached_image_tokens(a)
    assert image_tokens > 0
    assert first == 0
    assert cached_image_tokens(a) == (image_tokens, image_tokens)  # its own repeat is a hit
    assert cached_image_tokens(b) == (image_tokens, 0)
    assert cached_image_tokens(b) == (image_tokens, image_tokens)
