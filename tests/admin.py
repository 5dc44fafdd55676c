"""Tenants for live-server tests, made through the admin API as an operator would."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.conftest import ADMIN_KEY

ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


def new_tenant(server: Any, prefix: str = "t", **quota: Any) -> str:
    """A new tenant with `quota` set on top of the defaults; returns a key of it."""
    made = httpx.post(
        f"{server.base_url}/admin/tenants", headers=ADMIN, json={"name": f"{prefix}-{uuid.uuid4().hex[:8]}"}
    )
    assert made.status_code in (200, 201), made.text
    tenant = made.json()
    put = httpx.put(
        f"{server.base_url}/admin/tenants/{tenant['id']}/quota",
        headers=ADMIN,
        json={"tokens_per_minute": 10**6, **quota},
    )
    assert put.status_code == 200, put.text
    for name, value in quota.items():
        assert put.json()[name] == value, put.json()
    key = httpx.post(f"{server.base_url}/admin/tenants/{tenant['id']}/keys", headers=ADMIN, json={})
    assert key.status_code in (200, 201), key.text
    return str(key.json()["key"])
