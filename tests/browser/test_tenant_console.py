"""The tenant console in a real browser: sign-in, the playground, usage, requests and keys."""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import jsonschema

from tests import media, openai_wire
from tests.browser.pages import (
    new_tenant,
    shoot,
    sign_in,
    wait_until,
)
from tests.conftest import ADMIN_KEY
from tests.shapes import CITY
from tests.shapes import CLOCK_FUNCTION as CLOCK
from tests.shapes import WEATHER_FUNCTION as WEATHER


def test_sign_in_and_playground_with_an_image(server, browser, tenant_key, tmp_path: Path):
    page = browser.new_page()
    page.goto(server.base_url + "/console/signin")
    shoot(page, "signin")
    page.get_by_label("API key").fill("sk-tsr-not-a-key")
    page.get_by_role("button", name="Sign in").click()
    assert page.get_by_role("alert").inner_text() == "That key is not valid."
    sign_in(page, server, tenant_key)
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
    # The dropped image is built from its bytes in the page: fetching the preview's blob: URL back is a
    # connection the console's content security policy (connect-src 'self') rightly refuses.
    page.evaluate(
        """async (png64) => {
        const png = Uint8Array.from(atob(png64), (c) => c.charCodeAt(0));
        const dt = new DataTransfer();
        dt.items.add(new File([png], 'dropped.png', {type: 'image/png'}));
        dt.items.add(new File(['notes'], 'notes.txt', {type: 'text/plain'}));
        document.getElementById('dropzone').dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true}));
    }""",
        base64.b64encode(image.read_bytes()).decode(),
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
    wait_until(
        page,
        "(document.querySelector(\"#summary dd[data-field='cost']\") || {innerText: ''}).innerText.startsWith('$')",
        timeout=20_000,
    )
    # Thumbs on the answer: HTMX swaps the buttons in place and toasts; pressing the other one changes it.
    feedback = "(document.querySelector(\"#summary [data-field='feedback']\") || {innerText: ''}).innerText"
    page.get_by_role("button", name="Thumbs up").click()
    wait_until(page, f"{feedback}.includes('thumbs up')")
    assert "good answer" in page.locator("#toast").inner_text()
    page.get_by_role("button", name="Thumbs down").click()
    wait_until(page, f"{feedback}.includes('thumbs down')")
    shoot(page, "playground")

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
    shoot(page, "usage")
    # Using the console does not extend the sign-in: the cookie still expires when it did at sign-in.
    session = next(c for c in page.context.cookies() if c["name"] == "tessera_session")
    assert session["expires"] == cookies["tessera_session"]["expires"]
    with page.expect_download() as download:
        page.get_by_role("link", name="Export CSV").click()
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert [(r["day"], r["model"], r["image_tokens"], r["requests"]) for r in rows] == [(today, "small", "54", "1")]

    # The request log lists it; filters narrow it; the receipt shows its tokens.
    page.get_by_role("link", name="Requests").click()
    page.wait_for_url("**/console/requests")
    assert page.locator("#requests tbody tr").count() == 1
    assert "thumbs down" in page.locator("#requests tbody tr [data-field='feedback']").inner_text()
    page.get_by_label("Modalities").select_option("text")
    page.get_by_role("button", name="Filter").click()
    wait_until(page, "document.getElementById('requests-total').innerText.startsWith('0 ')")
    page.get_by_label("Modalities").select_option("text+image")
    page.get_by_role("button", name="Filter").click()
    wait_until(page, "document.getElementById('requests-total').innerText.startsWith('1 ')")
    assert "mix=text%2Bimage" in page.url  # HTMX pushed the filtered URL: reloading keeps the filter
    shoot(page, "requests")
    page.get_by_role("link", name=request_id[-12:]).click()
    page.wait_for_url(f"**/console/requests/{request_id}")
    assert page.locator("#receipt dd[data-field='image tokens']").inner_text().startswith("54")
    shoot(page, "receipt")
    page.close()


def test_keys_page_issues_once_restricts_and_revokes(server, browser, tenant_key):
    page = browser.new_page()
    sign_in(page, server, tenant_key)
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
    shoot(page, "keys")
    page.goto(server.base_url + "/console/keys")  # shown once: coming back must not show it again
    assert page.locator("#new-key").count() == 0
    assert new_key not in page.content()
    row = page.locator("tr", has_text="ci-bot")
    assert "small" in row.inner_text()
    assert (datetime.now(UTC) + timedelta(days=30)).date().isoformat() in row.inner_text()
    auth = {"authorization": f"Bearer {new_key}"}
    body = {"model": "large", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert openai_wire.post(server.v1 + "/chat/completions", headers=auth, json=body).status_code == 403
    row.get_by_role("button", name=f"Revoke {new_key[:15]}").click()
    wait_until(page, "document.querySelector('main').innerText.includes('revoked')")
    assert "revoked" in page.locator("tr", has_text="ci-bot").inner_text()
    assert httpx.get(server.v1 + "/models", headers=auth).status_code == 401
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/console/signin")
    page.goto(server.base_url + "/console/keys")
    assert page.url.endswith("/console/signin")  # the session is gone
    page.close()


def test_a_restricted_key_reads_keys_but_cannot_mint_a_broader_one(server, browser):
    tenant, _ = new_tenant(server, "scoped")
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    scoped = httpx.post(
        f"{server.base_url}/admin/tenants/{tenant}/keys", headers=admin, json={"allowed_models": ["small"]}
    ).json()["key"]
    page = browser.new_page()
    sign_in(page, server, scoped)
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
    sign_in(page, server, tenant_key)
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


def test_recorded_audio_streams_through_the_playground(server, browser, tenant_key):
    page = browser.new_page()
    sign_in(page, server, tenant_key)
    page.get_by_role("button", name="Record", exact=True).click()
    wait_until(page, "document.getElementById('record').getAttribute('aria-pressed') === 'true'")
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
    wait_until(
        page,
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


def _run_and_wait(page) -> None:
    page.get_by_role("button", name="Run").click()
    page.wait_for_selector("#breakdown dd[data-field='finish reason']", timeout=120_000)


def test_playground_json_schema_and_tools_stream_and_copy_as_code(server, browser, tenant_key):
    page = browser.new_page()
    sign_in(page, server, tenant_key)
    page.get_by_label("Model").select_option("large")
    page.get_by_label("Max tokens").fill("96")
    # The schema box shows only with the JSON schema format, so a schema left in it is not sent otherwise.
    assert not page.get_by_label("JSON schema", exact=True).is_visible()
    page.get_by_label("Response format").select_option(label="JSON schema")
    page.get_by_label("JSON schema", exact=True).fill(json.dumps(CITY, indent=2))
    page.get_by_label("Prompt", exact=True).fill("Describe Bergen in JSON.")
    _run_and_wait(page)
    answer = json.loads(page.locator("#answer").inner_text())
    jsonschema.validate(answer, CITY)
    assert page.locator("dd[data-field='finish reason']").inner_text() == "stop"
    assert page.locator("#tool-calls-box").is_hidden()
    code = page.locator("#code").inner_text()
    wrapped = {"type": "json_schema", "json_schema": {"name": "answer", "schema": CITY, "strict": True}}
    assert '"response_format":' + json.dumps(wrapped, separators=(",", ":")) in code
    assert '"tools"' not in code
    shoot(page, "playground-json-schema")

    # Tools, as bare functions; once they parse, the tool choice offers each by name. Named: the call is
    # get_weather's, its arguments valid, and the answer stops there.
    page.get_by_label("Response format").select_option(label="Text")
    page.get_by_label("Tools", exact=True).fill(json.dumps([WEATHER, CLOCK], indent=2))
    choices = page.get_by_label("Tool choice").locator("option").all_inner_texts()
    assert choices == ["auto", "required", "none", "get_weather", "get_time"]
    page.get_by_label("Tool choice").select_option(label="get_weather")
    page.get_by_label("Prompt", exact=True).fill("What is the weather in Oslo, in celsius?")
    _run_and_wait(page)
    call = page.locator("#tool-calls pre.tool-call")
    assert call.count() == 1
    assert call.get_attribute("data-name") == "get_weather"
    shown = call.inner_text()
    assert shown.startswith("get_weather({\n  ")  # pretty-printed arguments
    assert shown.endswith("\n})")
    jsonschema.validate(json.loads(shown.removeprefix("get_weather(").removesuffix(")")), WEATHER["parameters"])
    assert page.locator("dd[data-field='finish reason']").inner_text() == "stop"  # a named function stops
    assert page.locator("#answer").inner_text() == ""
    code = page.locator("#code").inner_text()
    assert '"response_format"' not in code  # the text format sends none, and the hidden schema stays behind
    tools = [{"type": "function", "function": f} for f in (WEATHER, CLOCK)]
    assert '"tools":' + json.dumps(tools, separators=(",", ":")) in code
    assert '"tool_choice":{"type":"function","function":{"name":"get_weather"}}' in code
    assert "delta.tool_calls" in code  # the Python snippet prints the calls as well
    shoot(page, "playground-tools")
    # The copied curl asks the API the same, and gets the call streamed back.
    curl = code.split("\n\n", 1)[0]
    env = {**os.environ, "TESSERA_API_KEY": tenant_key}
    ran = subprocess.run(
        ["bash", "-c", curl + " --silent --show-error --fail"], check=False, env=env, capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    assert '"tool_calls":[{"index":0,' in ran.stdout
    assert '"name":"get_weather"' in ran.stdout
    page.close()


def test_playground_refusals_of_the_schema_and_tools_are_toasts(server, browser, tenant_key):
    page = browser.new_page()
    sign_in(page, server, tenant_key)
    page.get_by_label("Model").select_option("small")
    page.get_by_label("Response format").select_option(label="JSON schema")
    page.get_by_label("JSON schema", exact=True).fill('{"type": "object",')
    page.get_by_role("button", name="Run").click()
    toast = page.locator("#toast .toast-message")
    toast.wait_for()
    assert (
        toast.inner_text()
        == "The JSON schema is not valid JSON: Expecting property name enclosed in double quotes (line 1, column 19)"
    )
    assert page.locator("#code").inner_text() == ""  # nothing runnable to copy
    # The API's own refusal: `auto` needs a tool-call parser, which the small model lacks.
    page.get_by_label("Response format").select_option(label="Text")
    page.get_by_label("Tools", exact=True).fill(json.dumps(WEATHER))
    page.get_by_label("Tool choice").select_option("auto")
    page.get_by_role("button", name="Run").click()
    wait_until(
        page,
        "(document.querySelector('#toast .toast-message') || {innerText: ''}).innerText.includes('tool-call parser')",
        timeout=30_000,
    )
    assert page.locator("#breakdown dd").count() == 0
    page.close()
