"""Every mutating admin route leaves its audit row, whoever calls it: the admin API, the admin console (and a
tenant managing its own keys in the console), and the command line; `GET /admin/audit` and the console's audit
page show them."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import httpx

from tests.admin import ADMIN
from tests.conftest import ADMIN_KEY, REPO


def _audit(server, **params) -> list[dict]:
    resp = httpx.get(f"{server.base_url}/admin/audit", headers=ADMIN, params=params, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


def _one(server, action: str, target: str) -> dict:
    rows = _audit(server, action=action, target=target)
    assert len(rows) == 1, (action, target, rows)
    return rows[0]


def test_the_admin_api_leaves_a_row_per_change(server):
    api = httpx.Client(base_url=server.base_url, headers=ADMIN, timeout=30)
    tenant = api.post("/admin/tenants", json={"name": f"audit-{uuid.uuid4().hex[:6]}"}).json()
    api.patch(f"/admin/tenants/{tenant['id']}", json={"status": "suspended"}).raise_for_status()
    api.put(f"/admin/tenants/{tenant['id']}/quota", json={"tokens_per_minute": 4321}).raise_for_status()
    key = api.post(f"/admin/tenants/{tenant['id']}/keys", json={"name": "k"}).json()
    api.post(f"/admin/keys/{key['id']}/revoke").raise_for_status()
    before = api.get("/admin/prices").json()["data"]["whisper"]["audio_seconds"]
    api.put("/admin/prices/whisper/audio_seconds", json={"micros_per_million": 123_000_000}).raise_for_status()
    api.put("/admin/prices/whisper/audio_seconds", json={"micros_per_million": before}).raise_for_status()
    who = "api:static admin key"
    assert _one(server, "tenant.create", tenant["id"])["actor"] == who
    assert _one(server, "tenant.status", tenant["id"])["after"] == {"status": "suspended"}
    assert _one(server, "quota.update", tenant["id"])["after"] == {"tokens_per_minute": 4321}
    assert _one(server, "key.issue", key["id"])["after"]["prefix"] == key["prefix"]
    assert _one(server, "key.revoke", key["id"])["actor"] == who
    changed, restored = _audit(server, action="price.set", target="whisper/audio_seconds")[:2][::-1]
    assert changed["after"] == {"value": 123_000_000}
    assert restored["before"]["value"] == 123_000_000
    assert all(key["key"] not in str(row) for row in _audit(server, target=key["id"]))


def _signed_in(server, path: str, key: str) -> tuple[httpx.Client, str]:
    http = httpx.Client(base_url=server.base_url, timeout=60)
    http.get(path)
    token = http.cookies["csrftoken"]
    signed = http.post(path, data={"api_key": key, "_csrf_token": token})
    assert signed.status_code in (200, 302, 303), signed.text
    return http, token


def test_the_admin_console_leaves_a_row_per_change(server):
    http, token = _signed_in(server, "/console/admin/signin", ADMIN_KEY)
    headers = {"x-csrftoken": token}
    name = f"console-{uuid.uuid4().hex[:6]}"
    quota = {"tokens_per_minute": "1000", "concurrent_requests": "2", "monthly_token_budget": ""}
    quota["monthly_cost_budget"] = ""
    made = http.post("/console/admin/tenants", data={"name": name, **quota}, headers=headers)
    assert made.status_code == 201, made.text
    listed = httpx.get(f"{server.base_url}/admin/tenants", headers=ADMIN).json()["data"]
    tenant = next(t for t in listed if t["name"] == name)
    base = f"/console/admin/tenants/{tenant['id']}"
    assert http.post(base + "/status", data={"status": "suspended"}, headers=headers).status_code == 200
    assert http.post(base + "/quota", data={**quota, "tokens_per_minute": "2000"}, headers=headers).status_code == 200
    assert http.post(base + "/keys", data={"name": "from-console"}, headers=headers).status_code == 201
    key_id = _audit(server, action="key.issue", actor="console:static admin key")[0]["target"]
    assert http.post(f"{base}/keys/{key_id}/revoke", headers=headers).status_code == 200
    output = httpx.get(f"{server.base_url}/admin/prices", headers=ADMIN).json()["data"]["small"]["output"]
    assert http.post("/console/admin/prices", data={"small.output": "0.75"}, headers=headers).status_code == 200
    who = "console:static admin key"
    rows = _audit(server, target=tenant["id"])
    assert [r["action"] for r in rows][:2] == ["quota.update", "tenant.status"]
    assert rows[-1]["action"] == "tenant.create"
    assert {r["actor"] for r in rows} == {who}
    assert rows[0]["after"]["tokens_per_minute"] == 2000
    assert _one(server, "key.revoke", key_id)["actor"] == who
    assert _audit(server, action="price.set", target="small/output")[0]["after"] == {"value": 750_000}
    restore = httpx.put(
        f"{server.base_url}/admin/prices/small/output", headers=ADMIN, json={"micros_per_million": output}
    )
    assert restore.status_code == 200
    page = http.get("/console/admin/audit", params={"target": tenant["id"]})
    assert page.status_code == 200
    assert page.text.count("<tr><td>") == len(rows)
    assert "/console/admin/audit" in http.get("/console/admin/").text  # the nav links the page
    http.close()


def test_a_tenant_managing_its_own_keys_leaves_rows(server):
    from tests.admin import new_tenant

    key = new_tenant(server, "self")
    http, token = _signed_in(server, "/console/signin", key)
    assert http.post("/console/keys/", data={"name": "mine"}, headers={"x-csrftoken": token}).status_code == 201
    row = _audit(server, action="key.issue", actor=f"console:{key[:15]}")
    assert len(row) == 1
    assert row[0]["after"]["name"] == "mine"
    http.close()


def test_the_command_line_leaves_rows(server):
    data_dir = server.log_path.parent
    env = {**os.environ, "TESSERA_DATA_DIR": str(data_dir)}
    name = f"cli-{uuid.uuid4().hex[:6]}"
    subprocess.run([sys.executable, "-m", "tessera", "tenants", "create", name], cwd=REPO, env=env, check=True)
    out = subprocess.run(
        [sys.executable, "-m", "tessera", "keys", "create", "--tenant", name],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = _audit(server, action="tenant.create")
    created = next(r for r in rows if r["after"]["name"] == name)
    assert created["actor"].startswith("cli:")
    issued = _audit(server, action="key.issue", target=out.split("(")[1].split(")")[0])
    assert len(issued) == 1
    assert issued[0]["actor"] == created["actor"]
