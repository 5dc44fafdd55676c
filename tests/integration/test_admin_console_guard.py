"""Every admin console route, read from the app's own route table, refuses an anonymous caller and a signed-in
tenant (a redirect to the admin sign-in) before its handler runs; only signing in and out are open."""

from __future__ import annotations

import re

import httpx
import pytest

from config.settings import Settings
from tessera.app import ADMIN_CONSOLE, create_app
from tests.admin import new_tenant

OPEN = {f"{ADMIN_CONSOLE}/signin", f"{ADMIN_CONSOLE}/signout"}


def _admin_routes() -> list[tuple[str, str]]:
    app = create_app(Settings())  # never started: only its route table is read
    found = []
    for route in app.routes:
        if not route.path.startswith(ADMIN_CONSOLE) or route.path.rstrip("/") in OPEN:
            continue
        for method in sorted(getattr(route, "methods", set()) - {"HEAD", "OPTIONS"}):
            found.append((method, re.sub(r"\{(\w+):\w+\}", r"x-\1", route.path)))
    return found


ROUTES = _admin_routes()


def test_the_route_table_has_the_admin_pages():
    paths = {path.rstrip("/") for _, path in ROUTES}
    assert {
        ADMIN_CONSOLE,
        f"{ADMIN_CONSOLE}/tenants",
        f"{ADMIN_CONSOLE}/prices",
        f"{ADMIN_CONSOLE}/audit",
    } <= paths
    assert len(ROUTES) >= 12


def _client(server, tenant_key: str | None) -> tuple[httpx.Client, dict[str, str]]:
    http = httpx.Client(base_url=server.base_url, timeout=30, follow_redirects=False)
    http.get("/console/signin")
    token = http.cookies["csrftoken"]
    if tenant_key is not None:
        signed = http.post("/console/signin", data={"api_key": tenant_key, "_csrf_token": token})
        assert signed.status_code == 303, signed.text
    return http, {"x-csrftoken": token}


@pytest.mark.parametrize("who", ["anonymous", "tenant"])
def test_every_admin_console_route_refuses_non_admins(server, who):
    http, headers = _client(server, new_tenant(server, "guard") if who == "tenant" else None)
    refused = []
    for method, path in ROUTES:
        resp = http.request(method, path, headers=headers, data={"name": "x", "status": "suspended"})
        if not (resp.status_code == 303 and resp.headers["location"] == f"{ADMIN_CONSOLE}/signin"):
            refused.append((method, path, resp.status_code))
    http.close()
    assert refused == [], f"admin console routes that did not send a {who} caller to the admin sign-in"
