"""The playground's transcribe and embed modes in a real browser: an uploaded clip and a recorded one transcribed on
the transcription pool, texts embedded with their dimensions, norms and cosine similarities, and each result's
receipt."""

from __future__ import annotations

import time
from pathlib import Path

import soundfile as sf

from tests import media
from tests.browser.pages import shoot, sign_in, wait_until


def test_an_uploaded_clip_is_transcribed(server, browser, tenant_key, tmp_path: Path):
    clip = tmp_path / "coffee.wav"
    sf.write(clip, media.speech("I would like a cup of coffee."), 16_000, subtype="PCM_16")
    page = browser.new_page()
    sign_in(page, server, tenant_key)
    page.get_by_label("Transcribe a clip").check()
    assert page.locator("#text").is_hidden()
    assert page.locator("#images").is_disabled()
    assert page.get_by_label("Model").input_value() == "whisper"
    page.set_input_files("#audio", str(clip))
    page.get_by_role("button", name="Transcribe").click()
    page.wait_for_selector("#task-result [data-field='transcript']", timeout=60_000)
    assert "coffee" in page.locator("[data-field='transcript']").inner_text().lower()
    assert page.locator("#task-result tbody tr").count() >= 1  # its timed segments
    assert "client.audio.transcriptions.create" in page.locator("#code").inner_text()
    shoot(page, "playground-transcribe")
    page.locator("#task-result a", has_text="details").click()
    page.wait_for_selector("dd[data-field='endpoint']")
    assert page.locator("dd[data-field='endpoint']").inner_text() == "transcriptions"
    assert page.locator("dd[data-field='audio seconds']").inner_text().endswith(" s")
    page.close()


def test_a_recorded_clip_is_transcribed(server, browser, tenant_key):
    page = browser.new_page()
    sign_in(page, server, tenant_key)
    page.get_by_label("Transcribe a clip").check()
    page.get_by_role("button", name="Record", exact=True).click()
    wait_until(page, "document.getElementById('record').getAttribute('aria-pressed') === 'true'")
    time.sleep(1.5)
    page.get_by_role("button", name="Stop", exact=True).click()
    page.wait_for_selector("#audio-preview audio")
    page.get_by_role("button", name="Transcribe").click()
    page.wait_for_selector("#task-result [data-field='duration']", timeout=60_000)
    seconds = float(page.locator("[data-field='duration']").inner_text().split()[0])
    assert 1.0 < seconds < 5.0  # the synthetic microphone's tone: whatever Whisper makes of it, the clip was heard
    page.close()


def test_texts_are_embedded_with_norms_and_similarities(server, browser, tenant_key):
    page = browser.new_page()
    sign_in(page, server, tenant_key)
    page.get_by_label("Embed texts").check()
    assert page.get_by_label("Model").input_value() == "minilm"
    assert page.locator("#dropzone").is_hidden()
    page.get_by_role("button", name="Embed").click()
    page.wait_for_selector("#task-result [data-field='similarities']", timeout=60_000)
    assert page.locator("[data-field='dimensions']").inner_text() == "384"
    rows = page.locator("[data-field='similarities'] tbody tr")
    assert rows.count() == 3
    cells = [[float(c) for c in rows.nth(i).locator("td").all_inner_texts()] for i in range(3)]
    assert [round(r[0], 3) for r in cells] == [1.0, 1.0, 1.0]  # norms: the pooler normalises
    assert [round(cells[i][1 + i], 3) for i in range(3)] == [1.0, 1.0, 1.0]  # each text with itself
    assert cells[0][2] > cells[0][3] + 0.3  # the paraphrase is closer than the unrelated sentence
    shoot(page, "playground-embed")
    page.get_by_label("Chat").check()
    assert page.get_by_label("Model").input_value() in ("small", "large", "auto")
    assert page.locator("#text").is_visible()
    page.close()


def test_an_empty_embed_is_a_toast(server, browser, tenant_key):
    page = browser.new_page()
    sign_in(page, server, tenant_key)
    page.get_by_label("Embed texts").check()
    page.locator("#texts").fill("   ")
    page.get_by_role("button", name="Embed").click()
    page.wait_for_selector("#toast .toast-message", timeout=30_000)
    assert "at least one text" in page.locator("#toast").inner_text()
    page.close()
