"""The console in a real browser: Debian's Chromium driven by Playwright, against the live server."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import httpx
import pytest

from tests import media
from tests.conftest import ADMIN_KEY, REPO

ARTIFACTS = REPO / "artifacts" / "screenshots"
WIDTHS = {"desktop": 1280, "mobile": 390}


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    assert executable, "Debian's chromium is required: make setup installs it"
    with sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=executable,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield b
        b.close()


@pytest.fixture
def tenant_key(server):
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    tenant = httpx.post(
        server.base_url + "/admin/tenants", headers=admin, json={"name": f"console-{uuid.uuid4().hex[:6]}"}
    ).json()
    return httpx.post(f"{server.base_url}/admin/tenants/{tenant['id']}/keys", headers=admin, json={}).json()["key"]


def _shoot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for label, width in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(ARTIFACTS / f"{name}-{label}.png"), full_page=True)
    page.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})


def _sign_in(page, server, key):
    page.goto(server.base_url + "/console/signin")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/playground")


def test_sign_in_and_playground_with_an_image(server, browser, tenant_key, tmp_path: Path):
    page = browser.new_page()
    page.goto(server.base_url + "/console/signin")
    _shoot(page, "signin")
    page.get_by_label("API key").fill("sk-tsr-not-a-key")
    page.get_by_role("button", name="Sign in").click()
    assert page.get_by_role("alert").inner_text() == "That key is not valid."
    _sign_in(page, server, tenant_key)
    cookies = {c["name"]: c for c in page.context.cookies()}
    assert cookies["tessera_session"]["httpOnly"]
    assert cookies["tessera_session"]["sameSite"] == "Lax"
    image = tmp_path / "photo.png"
    image.write_bytes(media.png_bytes(media.image(77)))
    page.get_by_label("Model").select_option("small")
    page.get_by_label("Prompt", exact=True).fill("Describe this photo.")
    page.get_by_label("Images").set_input_files(str(image))
    assert page.locator("#previews img").count() == 1
    page.get_by_role("button", name="Run").click()
    page.wait_for_selector("#breakdown dd[data-field='image tokens']", timeout=60_000)
    assert page.locator("#answer").inner_text().strip()
    assert page.locator("dd[data-field='image tokens']").inner_text().startswith("54")
    assert page.locator("dd[data-field='model']").inner_text().startswith("small")
    assert "client.chat.completions.create" in page.locator("#code").inner_text()
    _shoot(page, "playground")
    page.close()


def test_post_without_csrf_token_is_refused(server, tenant_key):
    with httpx.Client(base_url=server.base_url) as http:
        http.get("/console/signin")  # receives the CSRF cookie
        resp = http.post("/console/signin", data={"api_key": tenant_key})
        assert resp.status_code == 403
        token = http.cookies["csrftoken"]
        ok = http.post("/console/signin", data={"api_key": tenant_key, "_csrf_token": token})
        assert ok.status_code in (302, 303, 201, 200)


def test_keys_page_issues_once_restricts_and_revokes(server, browser, tenant_key):
    page = browser.new_page()
    _sign_in(page, server, tenant_key)
    page.get_by_role("link", name="Keys").click()
    page.wait_for_url("**/console/keys")
    assert page.get_by_text("in use here").count() == 1
    page.get_by_label("Name").fill("ci-bot")
    page.get_by_label("small").check()
    page.get_by_role("button", name="Create key").click()
    page.wait_for_selector("#new-key")
    new_key = page.locator("#new-key").inner_text().strip()
    assert new_key.startswith("sk-tsr-")
    _shoot(page, "keys")
    page.goto(server.base_url + "/console/keys")  # shown once: coming back must not show it again
    assert page.locator("#new-key").count() == 0
    assert new_key not in page.content()
    row = page.locator("tr", has_text="ci-bot")
    assert "small" in row.inner_text()
    auth = {"authorization": f"Bearer {new_key}"}
    body = {"model": "large", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert httpx.post(server.v1 + "/chat/completions", headers=auth, json=body).status_code == 403
    row.get_by_role("button", name=f"Revoke {new_key[:15]}").click()
    page.wait_for_function("document.querySelector('main').innerText.includes('revoked')")
    assert "revoked" in page.locator("tr", has_text="ci-bot").inner_text()
    assert httpx.get(server.v1 + "/models", headers=auth).status_code == 401
    page.close()
