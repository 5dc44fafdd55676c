"""Tenants on the live server: isolation, model restrictions, rate limits and budgets, admin API."""

from __future__ import annotations

import uuid

import httpx
import pytest
from openai import RateLimitError

from tests import openai_wire
from tests.conftest import ADMIN_KEY, API_KEY

ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


def _admin(server, method, path, **kw):
    resp = httpx.request(method, server.base_url + path, headers=ADMIN, timeout=30, **kw)
    assert resp.status_code < 300, resp.text
    return resp.json()


def _tenant(server, **quota):
    return _admin(server, "POST", "/admin/tenants", json={"name": f"t-{uuid.uuid4().hex[:8]}", **quota})


def _key(server, tenant, **kw):
    return _admin(server, "POST", f"/admin/tenants/{tenant['id']}/keys", json=kw)["key"]


def _client(server, key):
    return openai_wire.openai_client(server.v1, key, timeout=120)


def _ask(client, model="small", **kw):
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=kw.pop("max_tokens", 3), **kw
    )


def test_receipts_are_private_to_their_tenant(server):
    a, b = _tenant(server), _tenant(server)
    key_a, key_b = _key(server, a), _key(server, b)
    resp = _ask(_client(server, key_a))
    mine = httpx.get(f"{server.v1}/usage/{resp.id}", headers={"authorization": f"Bearer {key_a}"})
    assert mine.status_code == 200, mine.text
    assert mine.json()["tokens"]["output"] == resp.usage.completion_tokens
    assert mine.json()["tokens"]["text"] == resp.usage.prompt_tokens_details.text_tokens
    theirs = httpx.get(f"{server.v1}/usage/{resp.id}", headers={"authorization": f"Bearer {key_b}"})
    assert theirs.status_code == 404
    totals = httpx.get(
        f"{server.v1}/usage", params={"group_by": "model"}, headers={"authorization": f"Bearer {key_b}"}
    ).json()
    assert totals["data"] == []
    by_model = httpx.get(
        f"{server.v1}/usage", params={"group_by": "model"}, headers={"authorization": f"Bearer {key_a}"}
    ).json()["data"]
    assert by_model[0]["model"] == "small"
    assert by_model[0]["requests"] == 1


def test_key_restricted_to_models(server):
    tenant = _tenant(server)
    client = _client(server, _key(server, tenant, allowed_models=["small"]))
    assert _ask(client).model == "small"
    resp = openai_wire.post(
        f"{server.v1}/chat/completions",
        headers={"authorization": f"Bearer {client.api_key}"},
        json={"model": "large", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    )
    assert resp.status_code == 403
    assert resp.json()["error"]["code"] == "model_not_allowed"


def test_revoked_key_and_suspended_tenant_are_refused(server):
    tenant = _tenant(server)
    key = _key(server, tenant)
    keys = _admin(server, "GET", f"/admin/tenants/{tenant['id']}/keys")["data"]
    _admin(server, "POST", f"/admin/keys/{keys[0]['id']}/revoke")
    resp = httpx.get(f"{server.v1}/models", headers={"authorization": f"Bearer {key}"})
    assert resp.status_code == 401
    other = _tenant(server)
    key2 = _key(server, other)
    _admin(server, "PATCH", f"/admin/tenants/{other['id']}", json={"status": "suspended"})
    assert httpx.get(f"{server.v1}/models", headers={"authorization": f"Bearer {key2}"}).status_code == 401


def test_lowered_tpm_gives_429_with_rate_limit_headers(server):
    tenant = _tenant(server)
    client = _client(server, _key(server, tenant))
    assert _ask(client).usage.completion_tokens >= 1
    _admin(server, "PUT", f"/admin/tenants/{tenant['id']}/quota", json={"tokens_per_minute": 10})
    with pytest.raises(RateLimitError) as exc:
        _ask(client)
    err = exc.value
    assert err.body["code"] == "rate_limit_exceeded"
    headers = err.response.headers
    assert int(headers["retry-after"]) >= 1
    assert int(headers["retry-after-ms"]) >= 1
    assert headers["x-ratelimit-limit-tokens"] == "10"
    assert "x-ratelimit-remaining-requests" in headers


def test_spent_budget_is_insufficient_quota(server):
    tenant = _tenant(server, monthly_token_budget=1)
    with pytest.raises(RateLimitError) as exc:
        _ask(_client(server, _key(server, tenant)))
    assert exc.value.body["code"] == "insufficient_quota"
    assert exc.value.body["type"] == "insufficient_quota"


def test_admin_api_needs_an_admin_key(server):
    assert (
        httpx.get(server.base_url + "/admin/tenants", headers={"authorization": f"Bearer {API_KEY}"}).status_code == 403
    )
    assert httpx.get(server.base_url + "/admin/tenants").status_code == 401
    names = [t["name"] for t in _admin(server, "GET", "/admin/tenants")["data"]]
    assert "demo" in names
    dup = httpx.post(server.base_url + "/admin/tenants", headers=ADMIN, json={"name": "demo"})
    assert dup.status_code == 409
    assert dup.json()["error"]["code"] == "tenant_exists"


def test_no_key_or_media_bytes_in_the_logs(server):
    from tests import media

    tenant = _tenant(server)
    key = _key(server, tenant)
    url = media.png_data_url(404)
    client = _client(server, key)
    client.chat.completions.create(
        model="small",
        max_tokens=2,
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": url}}],
            }
        ],
    )
    bad = openai_wire.post(
        server.v1 + "/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={
            "model": "small",
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url[:-40] + "@@@@"}}]}
            ],
        },
    )
    assert bad.status_code == 400
    httpx.get(server.v1 + "/models", headers={"authorization": f"Bearer {key}x"})  # a wrong key, logged as 401
    log = server.log_path.read_text(errors="replace")
    for secret in (key, key + "x", API_KEY, ADMIN_KEY):
        assert secret not in log
    payload = url.split(",", 1)[1]
    assert payload[100:160] not in log
