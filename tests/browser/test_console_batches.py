"""The console's Batches page in a real browser: upload a JSONL, watch the batch's progress move without reloading
(HTMX), download its output, cancel another mid-way, and see both in the admin overview."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.browser.pages import admin_sign_in, new_tenant, shoot, sign_in, wait_until


def _jsonl(tmp_path: Path, name: str, n: int, max_tokens: int = 4, **extra) -> Path:
    lines = [
        {
            "custom_id": f"{name}-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "small",
                "max_tokens": max_tokens,
                "temperature": 0,
                "messages": [{"role": "user", "content": f"Say {i}."}],
                **extra,
            },
        }
        for i in range(n)
    ]
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_upload_watch_download_and_cancel(server, browser, tmp_path: Path):
    _, key = new_tenant(server, "batches")
    page = browser.new_page()
    sign_in(page, server, key)
    page.get_by_role("link", name="Batches").click()
    page.wait_for_url("**/console/batches")
    assert page.get_by_text("No batches yet.").count() == 1
    page.get_by_label("Requests (JSONL)").set_input_files(str(_jsonl(tmp_path, "small", 3)))
    page.get_by_role("button", name="Submit batch").click()
    wait_until(page, "document.querySelector('[role=status]')?.innerText.includes('submitted from small.jsonl')")
    batch_id = page.locator("#batch-table tbody tr").first.get_attribute("id").removeprefix("row-")
    # The row refreshes itself (HTMX every 2 s) until the batch completes; the page is never reloaded.
    page.evaluate("window.__same_page = true")
    wait_until(page, f"document.getElementById('row-{batch_id}')?.dataset.status === 'completed'", timeout=180_000)
    assert page.evaluate("window.__same_page") is True
    row = page.locator(f"#row-{batch_id}")
    assert "3 done, 0 failed of 3" in row.inner_text()
    assert row.locator("progress").get_attribute("value") == "3"
    shoot(page, "batches")
    with page.expect_download() as download:
        row.get_by_role("link", name="output").click()
    lines = [json.loads(x) for x in Path(download.value.path()).read_text().splitlines()]
    assert sorted(x["custom_id"] for x in lines) == ["small-0", "small-1", "small-2"]
    assert all(x["response"]["status_code"] == 200 for x in lines)
    # Another tenant's download link is not found.
    _, other = new_tenant(server, "batches-other")
    stranger = browser.new_page()
    sign_in(stranger, server, other)
    assert stranger.request.get(f"{server.base_url}/console/batches/{batch_id}/output").status == 404
    stranger.close()

    # Long enough (about 19,000 tokens) that the cancel lands before it ends: 40 lines of 24 tokens once ended
    # within a second.
    long = _jsonl(tmp_path, "long", 300, max_tokens=64, ignore_eos=True)
    page.get_by_label("Requests (JSONL)").set_input_files(str(long))
    page.get_by_role("button", name="Submit batch").click()
    wait_until(page, "document.querySelector('[role=status]')?.innerText.includes('submitted from long.jsonl')")
    long_id = page.locator("#batch-table tbody tr").first.get_attribute("id").removeprefix("row-")
    page.get_by_role("button", name=f"Cancel {long_id}").click()
    wait_until(page, f"document.getElementById('row-{long_id}')?.dataset.status === 'cancelled'", timeout=180_000)
    api = httpx.get(f"{server.v1}/batches/{long_id}", headers={"authorization": f"Bearer {key}"}).json()
    assert api["status"] == "cancelled"
    assert api["request_counts"]["total"] in (0, 300)  # cancelled before its lines were read, or mid-way
    page.close()

    admin = browser.new_page()
    admin_sign_in(admin, server)
    table = admin.locator("#batches-all")
    assert batch_id[:18] in table.inner_text()
    assert "cancelled" in admin.locator(f"#row-{long_id}").inner_text()
    admin.close()
