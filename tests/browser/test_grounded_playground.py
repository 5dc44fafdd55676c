"""The playground on the trained large demo: it hears when the meeting is and sees a red circle, and scores each."""

from __future__ import annotations

import re
from pathlib import Path

from demo.speech import wav_bytes
from demo.world import Scene, Shape, png_bytes
from tests import media
from tests.browser.pages import shoot, sign_in, wait_until
from tests.conftest import API_KEY

SCORE = (
    "/^[0-9.]+$/.test((document.querySelector(\"#summary dd[data-field='grounding']\") || {innerText: ''}).innerText)"
)


def _ask(page, prompt: str) -> tuple[str, float]:
    page.get_by_label("Model").select_option("large")
    page.get_by_label("Prompt", exact=True).fill(prompt)
    page.get_by_role("button", name="Run").click()
    page.wait_for_selector("#breakdown dd[data-field='model']", timeout=120_000)
    wait_until(page, SCORE, timeout=60_000)
    return page.locator("#answer").inner_text().strip(), float(
        page.locator("#summary dd[data-field='grounding']").inner_text()
    )


def test_the_playground_sees_the_red_circle(large_server, browser, tmp_path: Path):
    page = browser.new_page()
    sign_in(page, large_server, API_KEY)
    circle = tmp_path / "circle.png"
    # 2.7 times the world's large radius (0.11 of the shorter side, 26 px here): a picture filled by one shape
    scene = Scene(320, 240, (255, 255, 255), 0.0, 0, (Shape("circle", "red", "large", "centre", 160, 120, 70),))
    circle.write_bytes(png_bytes(scene))
    page.get_by_label("Images").set_input_files(str(circle))
    answer, score = _ask(page, "What shape and colour is in this image?")
    words = set(re.findall(r"[a-z]+", answer.lower()))
    assert {"red", "circle"} <= words, answer
    assert not words & {"woman", "dress", "square", "triangle", "star", "blue", "green"}, answer
    assert score == 1.0, answer
    checked = page.locator("#summary [data-field='checked claims']").inner_text()
    assert "circle" in checked, checked  # each claim, with the evidence behind it
    assert "label_head" in checked, checked
    shoot(page, "playground-grounded-image")
    page.close()


def test_the_playground_hears_when_the_meeting_is(large_server, browser, tmp_path: Path):
    page = browser.new_page()
    sign_in(page, large_server, API_KEY)
    clip = tmp_path / "meeting.wav"
    clip.write_bytes(wav_bytes(media.speech("The meeting is moved to Thursday at three o'clock.")))
    page.get_by_label("Audio (WAV or MP3, or record one)").set_input_files(str(clip))
    answer, score = _ask(page, "When is the meeting?")
    assert "thursday" in answer.lower(), answer
    assert re.search(r"\b(three|3)\b", answer.lower()), answer
    assert score == 1.0, answer
    shoot(page, "playground-grounded-audio")
    page.close()
