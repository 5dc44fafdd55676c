"""The console in a real browser: Debian's Chromium driven by Playwright, against the live server."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from tests import media
from tests.conftest import ADMIN_KEY, API_KEY, REPO

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
                # A synthetic microphone, so the playground's recorder can be driven.
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
            ],
        )
        yield b
        b.close()


def _new_tenant(server, prefix: str = "console") -> tuple[str, str]:
    """A fresh tenant through the admin API: (tenant id, API key)."""
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    tenant = httpx.post(
        server.base_url + "/admin/tenants", headers=admin, json={"name": f"{prefix}-{uuid.uuid4().hex[:6]}"}
    ).json()
    key = httpx.post(f"{server.base_url}/admin/tenants/{tenant['id']}/keys", headers=admin, json={}).json()["key"]
    return tenant["id"], key


@pytest.fixture
def tenant_key(server):
    return _new_tenant(server)[1]


def _accessible(page, name: str) -> None:
    """axe-core's WCAG 2.1 A/AA rules on the page as it stands: no serious or critical violation."""
    from axe_playwright_python.sync_playwright import Axe

    options = {"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}}
    found = Axe().run(page, options=options).response["violations"]
    bad = [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in found
        if v["impact"] in ("serious", "critical")
    ]
    assert not bad, f"{name}: " + "; ".join(bad)


def _shoot(page, name: str) -> None:
    """Screenshots at both widths, after checking the page fits each width and passes the accessibility rules."""
    _accessible(page, name)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for label, width in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": 900})
        # The layout fits the width: nothing makes the page scroll sideways.
        assert page.evaluate("document.documentElement.scrollWidth") <= width, f"{name} overflows at {width}px"
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
    lifetime = cookies["tessera_session"]["expires"] - time.time()
    assert 11 * 3600 < lifetime <= 12 * 3600  # a console sign-in lasts 12 hours
    image = tmp_path / "photo.png"
    image.write_bytes(media.png_bytes(media.image(77)))
    page.get_by_label("Model").select_option("small")
    page.get_by_label("System prompt").fill("Answer briefly.")
    page.get_by_label("Prompt", exact=True).fill("Describe this photo.")
    page.get_by_label("Images").set_input_files(str(image))
    assert page.locator("#previews img").count() == 1
    # Dropping a second image adds it; dropping a text file is refused with a message.
    page.evaluate(
        """async () => {
        const png = await (await fetch(document.querySelector('#previews img').src)).blob();
        const dt = new DataTransfer();
        dt.items.add(new File([png], 'dropped.png', {type: 'image/png'}));
        dt.items.add(new File(['notes'], 'notes.txt', {type: 'text/plain'}));
        document.getElementById('dropzone').dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true}));
    }"""
    )
    assert page.locator("#previews img").count() == 2
    assert "1 file(s) ignored" in page.locator("#drop-status").inner_text()
    page.get_by_label("Images").set_input_files(str(image))  # back to the one image the checks below expect
    assert page.locator("#previews img").count() == 1
    page.get_by_role("button", name="Run").click()
    page.wait_for_selector("#breakdown dd[data-field='image tokens']", timeout=60_000)
    assert page.locator("#answer").inner_text().strip()
    assert page.locator("dd[data-field='image tokens']").inner_text().startswith("54")
    assert page.locator("dd[data-field='model']").inner_text().startswith("small")
    assert "client.chat.completions.create" in page.locator("#code").inner_text()
    assert '{"role":"system","content":"Answer briefly."}' in page.locator("#code").inner_text()
    request_id = page.locator("dd[data-field='request id']").inner_text().strip()
    page.wait_for_function(
        "(document.querySelector(\"#summary dd[data-field='cost']\") || {innerText: ''}).innerText.startsWith('$')",
        timeout=20_000,
    )
    _shoot(page, "playground")

    # The usage chart counts that request, with its image tokens in today's bar.
    receipt = page.request.get(f"{server.base_url}/console/requests/{request_id}")
    assert receipt.status == 200
    page.get_by_role("link", name="Usage").click()
    page.wait_for_url("**/console/usage")
    assert page.locator("#usage-requests").inner_text() == "1"
    today = datetime.now(UTC).date().isoformat()
    bar = page.locator(f"g.bar[data-day='{today}']")
    assert bar.locator("rect[data-series='image']").get_attribute("data-value") == "54"
    assert int(bar.get_attribute("data-total") or 0) > 54
    assert page.locator("#usage-models tbody tr").count() == 1
    assert page.locator("[data-gauge='tpm'] meter").count() == 1
    _shoot(page, "usage")
    with page.expect_download() as download:
        page.get_by_role("link", name="Export CSV").click()
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert [(r["day"], r["model"], r["image_tokens"], r["requests"]) for r in rows] == [(today, "small", "54", "1")]

    # The request log lists it; filters narrow it; the receipt shows its tokens.
    page.get_by_role("link", name="Requests").click()
    page.wait_for_url("**/console/requests")
    assert page.locator("#requests tbody tr").count() == 1
    page.get_by_label("Modalities").select_option("text")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_function("document.getElementById('requests-total').innerText.startsWith('0 ')")
    page.get_by_label("Modalities").select_option("text+image")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_function("document.getElementById('requests-total').innerText.startsWith('1 ')")
    assert "mix=text%2Bimage" in page.url  # HTMX pushed the filtered URL: reloading keeps the filter
    _shoot(page, "requests")
    page.get_by_role("link", name=request_id[-12:]).click()
    page.wait_for_url(f"**/console/requests/{request_id}")
    assert page.locator("#receipt dd[data-field='image tokens']").inner_text().startswith("54")
    _shoot(page, "receipt")
    page.close()


def _cold_playground(browser, server, tenant_key) -> dict:
    """Load the playground in a fresh context, signed in without rendering a page so the cache is cold."""
    context = browser.new_context()
    context.request.get(server.base_url + "/console/signin")
    token = next(c["value"] for c in context.cookies() if c["name"] == "csrftoken")
    signed = context.request.post(
        server.base_url + "/console/signin", form={"api_key": tenant_key, "_csrf_token": token}, max_redirects=0
    )
    assert signed.status == 303
    page = context.new_page()
    page.goto(server.base_url + "/console/playground", wait_until="load")
    page.wait_for_function("performance.getEntriesByName('tessera:interactive').length > 0")
    figures = page.evaluate(
        """() => {
        const nav = performance.getEntriesByType('navigation')[0];
        const res = performance.getEntriesByType('resource');
        return {
          html_bytes: nav.transferSize, html_decoded: nav.decodedBodySize,
          resources: res.map(r => ({
            name: new URL(r.name).pathname, transfer: r.transferSize, decoded: r.decodedBodySize,
          })),
          dom_interactive_ms: nav.domInteractive, dom_content_loaded_ms: nav.domContentLoadedEventEnd,
          load_ms: nav.loadEventEnd,
          interactive_ms: performance.getEntriesByName('tessera:interactive')[0].startTime,
          htmx_ready: !!window.htmx,
        };
    }"""
    )
    context.close()
    return figures


def test_playground_weight_and_time_to_interactive(server, browser, tenant_key):
    """Five cold loads; the weight and the median timings are written to artifacts for the record, not asserted
    on. Interactive means playground.js has attached every handler (its `tessera:interactive` mark)."""
    runs = [_cold_playground(browser, server, tenant_key) for _ in range(5)]
    figures = runs[-1]
    total = figures["html_bytes"] + sum(r["transfer"] for r in figures["resources"])
    decoded = figures["html_decoded"] + sum(r["decoded"] for r in figures["resources"])
    figures.update(page_weight_kb=round(total / 1024, 1), page_weight_decoded_kb=round(decoded / 1024, 1))
    for key in ("interactive_ms", "dom_content_loaded_ms", "load_ms"):
        figures[f"median_{key}"] = round(statistics.median(r[key] for r in runs), 1)
        figures[f"all_{key}"] = [round(r[key], 1) for r in runs]
    ARTIFACTS.parent.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS.parent / "playground-metrics.json").write_text(json.dumps(figures, indent=2))
    assert figures["htmx_ready"]
    assert {r["name"] for r in figures["resources"]} >= {"/static/htmx-2.0.4.min.js", "/static/playground.js"}
    assert total > 0
    assert 0 < figures["interactive_ms"] <= figures["load_ms"]


def test_post_without_csrf_token_is_refused(server, tenant_key):
    with httpx.Client(base_url=server.base_url) as http:
        http.get("/console/signin")  # receives the CSRF cookie
        resp = http.post("/console/signin", data={"api_key": tenant_key})
        assert resp.status_code == 403
        token = http.cookies["csrftoken"]
        ok = http.post("/console/signin", data={"api_key": tenant_key, "_csrf_token": token})
        assert ok.status_code in (302, 303, 201, 200)


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


def test_pages_and_assets_are_compressed_but_streams_are_not(server, client):
    gz = {"accept-encoding": "gzip"}
    asset = httpx.get(server.base_url + "/static/htmx-2.0.4.min.js", headers=gz)
    assert asset.headers.get("content-encoding") == "gzip"
    assert int(asset.headers["content-length"]) < 25_000  # 50 KB of script
    auth = {**gz, "authorization": f"Bearer {API_KEY}"}
    body = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True}
    with httpx.stream("POST", server.v1 + "/chat/completions", headers=auth, json=body) as stream:
        assert stream.status_code == 200
        assert "content-encoding" not in stream.headers
        assert stream.headers["content-type"].startswith("text/event-stream")
        stream.read()


def test_keys_page_issues_once_restricts_and_revokes(server, browser, tenant_key):
    page = browser.new_page()
    _sign_in(page, server, tenant_key)
    page.get_by_role("link", name="Keys").click()
    page.wait_for_url("**/console/keys")
    assert page.get_by_text("in use here").count() == 1
    page.get_by_label("Name").fill("ci-bot")
    page.get_by_label("small").check()
    page.get_by_label("Expires").select_option("30")
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
    assert (datetime.now(UTC) + timedelta(days=30)).date().isoformat() in row.inner_text()
    auth = {"authorization": f"Bearer {new_key}"}
    body = {"model": "large", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert httpx.post(server.v1 + "/chat/completions", headers=auth, json=body).status_code == 403
    row.get_by_role("button", name=f"Revoke {new_key[:15]}").click()
    page.wait_for_function("document.querySelector('main').innerText.includes('revoked')")
    assert "revoked" in page.locator("tr", has_text="ci-bot").inner_text()
    assert httpx.get(server.v1 + "/models", headers=auth).status_code == 401
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/console/signin")
    page.goto(server.base_url + "/console/keys")
    assert page.url.endswith("/console/signin")  # the session is gone
    page.close()


def _admin_sign_in(page, server):
    page.goto(server.base_url + "/console/admin/")
    page.wait_for_url("**/console/admin/signin")  # not signed in: sent to the admin sign-in
    page.get_by_label("Admin key").fill(ADMIN_KEY)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/admin/")


def test_admin_console_lowers_a_tenants_tpm_and_the_api_refuses(server, browser, client):
    page = browser.new_page()
    page.goto(server.base_url + "/console/admin/signin")
    _shoot(page, "admin-signin")
    page.get_by_label("Admin key").fill(API_KEY)  # a tenant key is not an admin key
    page.get_by_role("button", name="Sign in").click()
    assert page.get_by_role("alert").inner_text() == "That is not an admin key."
    _admin_sign_in(page, server)

    # The overview polls: a request made now shows up in the rate and the pool's TTFT within seconds.
    client.chat.completions.create(model="small", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    page.wait_for_function("Number(document.getElementById('live-rps').innerText) > 0", timeout=15_000)
    small = page.locator("#live-pools tr[data-pool='small']")
    assert "ms" in small.locator("td").nth(2).inner_text()
    assert page.locator("#live-cache").inner_text()
    _shoot(page, "admin-overview")

    name = f"acme-{uuid.uuid4().hex[:6]}"
    page.get_by_role("link", name="Tenants").click()
    page.get_by_label("Name").fill(name)
    page.get_by_role("button", name="Create tenant").click()
    page.get_by_role("link", name=name).wait_for()
    _shoot(page, "admin-tenants")
    page.get_by_role("link", name=name).click()
    page.get_by_role("heading", name=name).wait_for()
    page.get_by_role("button", name="Create key").click()
    page.wait_for_selector("#new-key")
    key = page.locator("#new-key").inner_text().strip()
    tenant = OpenAI(base_url=server.v1, api_key=key, max_retries=0, timeout=60)
    body = {"model": "small", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4}
    tenant.chat.completions.create(**body)

    page.get_by_label("Tokens per minute").fill("1")
    page.get_by_role("button", name="Save quota").click()
    page.get_by_text("Quota saved.").wait_for()
    assert " of 1 (" in page.locator("[data-gauge='tpm']").inner_text()
    with pytest.raises(openai.RateLimitError):
        tenant.chat.completions.create(**body)
    _shoot(page, "admin-tenant")

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
    _shoot(page, "admin-prices")
    httpx.put(server.base_url + "/admin/prices/small/output", headers=admin, json={"micros_per_million": before})
    page.close()


def test_a_tenant_never_sees_another_tenants_data(server, browser):
    tenant_a, key_a = _new_tenant(server, "alpha")
    _, key_b = _new_tenant(server, "beta")
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    key_a_id = httpx.get(f"{server.base_url}/admin/tenants/{tenant_a}/keys", headers=admin).json()["data"][0]["id"]
    api_a = OpenAI(base_url=server.v1, api_key=key_a, max_retries=0, timeout=60)
    done = api_a.chat.completions.create(
        model="small", messages=[{"role": "user", "content": "alpha's secret question"}], max_tokens=3
    )
    deadline = time.monotonic() + 15
    auth_a = {"authorization": f"Bearer {key_a}"}
    while httpx.get(f"{server.v1}/usage/{done.id}", headers=auth_a).status_code != 200:
        assert time.monotonic() < deadline, "the usage record of alpha's request was not written"
        time.sleep(0.2)

    page = browser.new_page()
    _sign_in(page, server, key_b)
    for path in ("/console/requests", "/console/usage", "/console/keys", "/console/playground"):
        page.goto(server.base_url + path)
        html = page.content()
        assert done.id not in html, path
        assert key_a[:15] not in html, path
    page.goto(server.base_url + "/console/requests")
    assert page.locator("#requests-total").inner_text() == "0 requests"
    page.goto(server.base_url + "/console/usage")
    assert page.locator("#usage-requests").inner_text() == "0"
    response = page.goto(f"{server.base_url}/console/requests/{done.id}")
    assert response is not None
    assert response.status == 404
    csv_body = page.request.get(server.base_url + "/console/usage/export.csv").text()
    assert csv_body.strip().splitlines() == [
        ",".join(("day", "model", "requests", "text_tokens", "image_tokens", "audio_tokens", "output_tokens", "cost"))
    ]
    summary = page.request.get(f"{server.base_url}/console/requests/{done.id}/summary").text()
    assert "$" not in summary
    # B cannot revoke A's key by its id, and A's key keeps working.
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    revoke = page.request.post(
        f"{server.base_url}/console/keys/{key_a_id}/revoke", headers={"x-csrftoken": token}, max_redirects=0
    )
    assert revoke.status == 404
    assert httpx.get(server.v1 + "/models", headers=auth_a).status_code == 200
    # A tenant session is not an admin session, for pages and for their partials alike.
    for path in ("/console/admin/tenants", "/console/admin/live", f"/console/admin/tenants/{tenant_a}/gauges"):
        answer = page.request.get(server.base_url + path, max_redirects=0)
        assert answer.status == 303, path
        assert answer.headers["location"].endswith("/console/admin/signin"), path
    csv_a = page.request.get(f"{server.base_url}/console/admin/tenants/{tenant_a}/export.csv", max_redirects=0)
    assert csv_a.status == 303
    page.close()


def test_a_restricted_key_reads_keys_but_cannot_mint_a_broader_one(server, browser):
    tenant, _ = _new_tenant(server, "scoped")
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    scoped = httpx.post(
        f"{server.base_url}/admin/tenants/{tenant}/keys", headers=admin, json={"allowed_models": ["small"]}
    ).json()["key"]
    page = browser.new_page()
    _sign_in(page, server, scoped)
    page.goto(server.base_url + "/console/keys")
    assert page.locator("#keys-restricted").count() == 1
    assert page.get_by_role("button", name="Create key").count() == 0
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    minted = page.request.post(
        server.base_url + "/console/keys", form={"name": "broader", "_csrf_token": token}, max_redirects=0
    )
    assert minted.status == 403
    assert "sk-tsr-" not in minted.text().split("<table")[0]
    keys = httpx.get(f"{server.base_url}/admin/tenants/{tenant}/keys", headers=admin).json()["data"]
    assert [k["name"] for k in keys if k["name"] == "broader"] == []
    page.close()


def test_copy_as_code_runs_as_given(server, browser, tenant_key, tmp_path: Path):
    page = browser.new_page()
    _sign_in(page, server, tenant_key)
    page.get_by_label("Model").select_option("small")
    page.get_by_label("Prompt", exact=True).fill('What\'s the time? Say "now".')  # quotes of both kinds
    page.get_by_label("Max tokens").fill("3")
    page.get_by_role("button", name="Run").click()
    page.wait_for_selector("#breakdown dd[data-field='request id']", timeout=60_000)
    code = page.locator("#code").inner_text()
    curl, python = code.split("\n\n", 1)
    env = {**os.environ, "TESSERA_API_KEY": tenant_key}
    ran = subprocess.run(
        ["bash", "-c", curl + " --silent --show-error --fail"], check=False, env=env, capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    assert "data: [DONE]" in ran.stdout
    script = tmp_path / "snippet.py"
    script.write_text(python)
    ran = subprocess.run(
        [sys.executable, str(script)], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    page.close()


def test_errors_toast_under_htmx_page_without_and_reading_without_js(server, browser, tenant_key):
    page = browser.new_page()
    _sign_in(page, server, tenant_key)
    page.goto(server.base_url + "/console/usage")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.get_by_label("From", exact=True).fill("2026-02-01")
    page.get_by_label("To", exact=True).fill("2026-01-01")
    page.get_by_role("button", name="Show").click()
    page.wait_for_selector("#toast [role=alert]")
    assert "start date is after the end date" in page.locator("#toast").inner_text()
    assert page.locator("#usage-requests").count() == 1  # the page stayed; only the toast changed
    page.locator("#toast .toast-message").wait_for(state="hidden", timeout=12_000)  # it fades by itself
    page.get_by_label("From", exact=True).fill("2020-01-01")  # over a year: a second, different error
    page.get_by_role("button", name="Show").click()
    page.get_by_text("covers at most 366 days").wait_for(state="visible", timeout=5_000)
    response = page.goto(server.base_url + "/console/usage?start=2026-02-01&end=2026-01-01")
    assert response is not None
    assert response.status == 400
    assert page.get_by_role("heading").first.inner_text() == "Something went wrong (400)"
    _shoot(page, "error")
    api = httpx.get(server.v1 + "/usage?group_by=color", headers={"authorization": f"Bearer {tenant_key}"})
    assert api.status_code == 400
    assert api.json()["error"]["param"] == "group_by"
    page.close()

    context = browser.new_context(java_script_enabled=False)
    plain = context.new_page()
    _sign_in(plain, server, tenant_key)
    plain.goto(server.base_url + "/console/usage")
    assert plain.locator("figure.chart svg").count() == 1
    plain.goto(server.base_url + "/console/requests?mix=text")
    assert plain.locator("#requests-total").count() == 1
    plain.goto(server.base_url + "/console/keys")
    plain.get_by_label("Name").fill("no-js")
    plain.get_by_role("button", name="Create key").click()
    assert plain.locator("#new-key").inner_text().startswith("sk-tsr-")
    context.close()


def test_recorded_audio_streams_through_the_playground(server, browser, tenant_key):
    page = browser.new_page()
    _sign_in(page, server, tenant_key)
    page.get_by_role("button", name="Record", exact=True).click()
    page.wait_for_function("document.getElementById('record').getAttribute('aria-pressed') === 'true'")
    time.sleep(1.5)
    page.get_by_role("button", name="Stop", exact=True).click()
    page.wait_for_selector("#audio-preview audio")
    attached = page.evaluate(
        "(() => { const f = document.getElementById('audio').files[0]; return [f.name, f.type, f.size]; })()"
    )
    assert attached[0] == "recording.wav"
    assert attached[1] == "audio/wav"
    assert attached[2] > 44 + 16_000
    page.get_by_label("Model").select_option("small")
    page.get_by_label("Prompt", exact=True).fill("What do you hear?")
    page.get_by_role("button", name="Run").click()
    page.wait_for_selector("#breakdown dd[data-field='audio tokens']", timeout=60_000)
    assert int(page.locator("dd[data-field='audio tokens']").inner_text().split()[0]) > 0
    # The grounding score arrives after the answer; the synthetic microphone plays a tone, not speech, so the
    # answer has nothing in the audio to rest on.
    page.wait_for_function(
        "/^[0-9.]+$/.test((document.querySelector(\"#summary dd[data-field='grounding']\") || {innerText: ''})"
        ".innerText)",
        timeout=30_000,
    )
    score = float(page.locator("#summary dd[data-field='grounding']").inner_text())
    assert 0.0 <= score <= 1.0
    page.goto(server.base_url + f"/console/requests?grounding_below={min(score + 0.01, 1.0):.2f}")
    assert page.locator("#requests tbody tr").count() == 1
    assert page.locator("#requests tbody tr td").nth(3).inner_text() == "text+audio"
    page.goto(server.base_url + "/console/usage")
    cells = page.locator("#usage-grounding tbody tr td").all_inner_texts()
    assert cells[:3] == ["text+audio", "1", f"{score:.2f}"]
    page.close()
