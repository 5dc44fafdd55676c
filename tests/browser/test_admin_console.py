"""The admin console in a real browser: sign-in, the live overview, tenants, quotas, keys and prices."""

from __future__ import annotations

import uuid

import httpx
import openai
import pytest

from tests import openai_wire
from tests.browser.pages import (
    admin_sign_in,
    shoot,
    wait_until,
)
from tests.conftest import ADMIN_KEY, API_KEY


def test_admin_console_lowers_a_tenants_tpm_and_the_api_refuses(server, browser, client):
    page = browser.new_page()
    page.goto(server.base_url + "/console/admin/signin")
    shoot(page, "admin-signin")
    page.get_by_label("Admin key").fill(API_KEY)  # a tenant key is not an admin key
    page.get_by_role("button", name="Sign in").click()
    assert page.get_by_role("alert").inner_text() == "That is not an admin key."
    admin_sign_in(page, server)

    # The overview polls: a request made now shows up in the rate and the pool's TTFT within seconds.
    client.chat.completions.create(model="small", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    wait_until(page, "Number(document.getElementById('live-rps').innerText) > 0", timeout=15_000)
    small = page.locator("#live-pools tr[data-pool='small']")
    assert "ms" in small.locator("td").nth(4).inner_text()
    assert small.locator("td[data-field='architecture']").inner_text() == "Qwen2_5OmniForConditionalGeneration"
    assert small.locator("td[data-field='encoding']").inner_text() == "image: gateway, audio: features"
    assert page.locator("#live-cache").inner_text()
    shoot(page, "admin-overview")

    name = f"acme-{uuid.uuid4().hex[:6]}"
    page.get_by_role("link", name="Tenants").click()
    page.get_by_label("Name").fill(name)
    page.get_by_role("button", name="Create tenant").click()
    page.get_by_role("link", name=name).wait_for()
    shoot(page, "admin-tenants")
    page.get_by_role("link", name=name).click()
    page.get_by_role("heading", name=name).wait_for()
    page.get_by_role("button", name="Create key").click()
    page.wait_for_selector("#new-key")
    key = page.locator("#new-key").inner_text().strip()
    tenant = openai_wire.openai_client(server.v1, key, timeout=60)
    body = {"model": "small", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4}
    tenant.chat.completions.create(**body)

    page.get_by_label("Tokens per minute").fill("1")
    page.get_by_label("Guardrail policy").select_option("flag")
    page.get_by_label("Guardrail threshold").fill("0.65")
    page.get_by_role("button", name="Save quota").click()
    page.get_by_text("Quota saved.").wait_for()
    assert " of 1 (" in page.locator("[data-gauge='tpm']").inner_text()
    assert page.get_by_label("Guardrail policy").input_value() == "flag"
    assert page.get_by_label("Guardrail threshold").input_value() == "0.65"
    with pytest.raises(openai.RateLimitError):
        tenant.chat.completions.create(**body)
    shoot(page, "admin-tenant")

    page.get_by_role("button", name="Suspend tenant").click()
    page.get_by_text("Status saved.").wait_for()
    with pytest.raises(openai.AuthenticationError):
        tenant.chat.completions.create(**body)

    # Prices: one changed cell is saved and the JSON admin API agrees; then it is put back.
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    before = httpx.get(server.base_url + "/admin/prices", headers=admin).json()["data"]["small"]["output"]
    page.get_by_role("link", name="Prices").click()
    cell = page.get_by_label("small output price per million tokens")
    cell.fill("7.5")
    page.get_by_role("button", name="Save prices").click()
    page.get_by_text("1 price changed.").wait_for()
    assert httpx.get(server.base_url + "/admin/prices", headers=admin).json()["data"]["small"]["output"] == 7_500_000
    shoot(page, "admin-prices")
    httpx.put(server.base_url + "/admin/prices/small/output", headers=admin, json={"micros_per_million": before})
    page.close()


def test_admin_console_posts_need_the_csrf_token_too(server):
    with httpx.Client(base_url=server.base_url) as http:
        http.get("/console/admin/signin")
        token = http.cookies["csrftoken"]
        signed = http.post("/console/admin/signin", data={"api_key": ADMIN_KEY, "_csrf_token": token})
        assert signed.status_code == 303
        name = f"csrf-{uuid.uuid4().hex[:6]}"
        form = {"name": name, "tokens_per_minute": "100", "concurrent_requests": "1"}
        assert http.post("/console/admin/tenants", data=form).status_code == 403
        assert http.post("/console/admin/tenants", data={**form, "_csrf_token": token}).status_code == 201
