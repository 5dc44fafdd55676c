"""Grounding scores on the live server: audio answers get one after the response; text answers never do."""

from __future__ import annotations

import time

import httpx

from tests import media
from tests.conftest import API_KEY


def _receipt_when(server, request_id: str, ready, timeout_s: float = 60.0) -> dict:
    auth = {"authorization": f"Bearer {API_KEY}"}
    deadline = time.monotonic() + timeout_s
    while True:
        resp = httpx.get(f"{server.v1}/usage/{request_id}", headers=auth)
        if resp.status_code == 200 and ready(resp.json()):
            return resp.json()
        assert time.monotonic() < deadline, f"receipt of {request_id} not ready: {resp.status_code} {resp.text}"
        time.sleep(0.5)


def test_an_audio_answer_is_scored_after_the_response_and_a_text_answer_is_not(server, client):
    clip = media.speech("Please send the invoice to the finance team.")
    audio = {"type": "input_audio", "input_audio": {"data": media.wav_b64(clip), "format": "wav"}}
    spoken = client.chat.completions.create(
        model="small",
        messages=[{"role": "user", "content": [{"type": "text", "text": "What was said?"}, audio]}],
        max_tokens=12,
    )
    assert spoken.choices[0].message.content
    text = client.chat.completions.create(
        model="small", messages=[{"role": "user", "content": "Say something."}], max_tokens=4
    )
    scored = _receipt_when(server, spoken.id, lambda r: r["grounding_score"] is not None)
    assert 0.0 <= scored["grounding_score"] <= 1.0
    assert scored["modalities"] == "text+audio"
    plain = _receipt_when(server, text.id, lambda r: True)
    assert plain["grounding_score"] is None
    metrics = httpx.get(server.base_url + "/metrics").text
    scored_total = next(
        float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("tessera_grounding_scored_total")
    )
    assert scored_total >= 1
