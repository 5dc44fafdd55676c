"""The grounding guardrail on the live server: per-tenant policies flag, block and off, streamed and whole."""

from __future__ import annotations

import time

import httpx

from api.responses.rendering import lease_id
from demo.world import Scene, Shape, png_bytes
from grounding.guardrail import REFUSAL
from tests import media
from tests.admin import new_tenant
from tests.openai_wire import openai_client

# the `grounding` object of a flagged or passed response; `evidence_scores`: each evidence's own score
VERDICT_FIELDS = {
    "score",
    "threshold",
    "passed",
    "flagged",
    "claims",
    "unsupported_claims",
    "checked_claims",
    "evidence_scores",
}


def _tenant(server, policy: str, threshold: float = 0.9) -> str:
    """A new tenant under `policy`; returns its key."""
    return new_tenant(server, "guard", grounding_policy=policy, grounding_threshold=threshold)


def _red_circle() -> str:
    scene = Scene(320, 240, (250, 250, 250), 0.0, 0, (Shape("circle", "red", "large", "centre", 160, 120, 70),))
    return media.data_url(png_bytes(scene), "image/png")


def _image_question(url: str) -> list[dict]:
    parts = [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": "What shape and colour is in this image?"},
    ]
    return [{"role": "user", "content": parts}]


def _clip_question() -> list[dict]:
    clip = media.speech("The meeting is moved to Thursday at three o'clock.")
    audio = {"type": "input_audio", "input_audio": {"data": media.wav_b64(clip), "format": "wav"}}
    return [{"role": "user", "content": [audio, {"type": "text", "text": "When is the meeting?"}]}]


def _receipt(server, key: str, request_id: str, timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        got = httpx.get(f"{server.v1}/usage/{request_id}", headers={"authorization": f"Bearer {key}"})
        if got.status_code == 200 and got.json()["grounding_score"] is not None:
            return got.json()
        assert time.monotonic() < deadline, f"{request_id}: {got.status_code} {got.text}"
        time.sleep(0.5)


def test_flag_puts_the_verdict_on_the_response_and_on_the_last_chunk(server):
    key = _tenant(server, "flag")
    client = openai_client(server.v1, key, timeout=120)
    whole = client.chat.completions.create(model="large", messages=_image_question(_red_circle()), max_tokens=24)
    verdict = whole.model_dump()["grounding"]
    assert set(verdict) == VERDICT_FIELDS
    assert verdict["evidence_scores"] == {"label_head": verdict["score"]}  # the tenant's evidence, the default
    assert verdict["passed"] is (verdict["score"] >= 0.9)
    assert verdict["flagged"] is not verdict["passed"]
    receipt = _receipt(server, key, whole.id)
    assert receipt["grounding_score"] == verdict["score"]
    assert receipt["grounding_passed"] is verdict["passed"]
    assert receipt["question_kind"] == "describe"

    chunks = list(
        client.chat.completions.create(
            model="large",
            messages=_image_question(_red_circle()),
            max_tokens=24,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    last = chunks[-1].model_dump()
    assert last["usage"]["prompt_tokens"] > 0
    streamed = _receipt(server, key, chunks[0].id)  # the verdict on the last chunk is the one stored for the stream
    assert (last["grounding"]["score"], last["grounding"]["passed"]) == (
        streamed["grounding_score"],
        streamed["grounding_passed"],
    )
    assert all("grounding" not in c.model_dump() for c in chunks[:-1])


def test_a_text_request_carries_no_verdict(server):
    client = openai_client(server.v1, _tenant(server, "flag"), timeout=120)
    plain = client.chat.completions.create(model="small", messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
    assert "grounding" not in plain.model_dump()


def _blocked(server, key: str, temperature: float) -> dict:
    with httpx.Client(timeout=180) as http:
        resp = http.post(
            f"{server.v1}/chat/completions",
            headers={"authorization": f"Bearer {key}"},
            json={"model": "small", "messages": _clip_question(), "max_tokens": 16, "temperature": temperature},
        )
    assert resp.status_code == 200, resp.text
    return resp.json()


def _requests_metered(server, key: str) -> int:
    usage = httpx.get(f"{server.v1}/usage", headers={"authorization": f"Bearer {key}"}, params={"group_by": "model"})
    assert usage.status_code == 200, usage.text
    return sum(row["requests"] for row in usage.json()["data"])


def test_block_regenerates_then_refuses_an_answer_its_audio_does_not_support(server):
    # The small pool's weights are random: its answer about the clip states nothing the clip supports. On the
    # shared server it is also the strongest pool that takes audio.
    key = _tenant(server, "block")
    body = _blocked(server, key, temperature=0.9)
    message = body["choices"][0]["message"]
    assert message["content"] is None
    assert message["refusal"] == REFUSAL
    assert body["grounding"]["regenerated"] is True
    assert body["grounding"]["passed"] is False
    assert _receipt(server, key, body["id"])["grounding_passed"] is False
    assert _requests_metered(server, key) == 2  # both attempts ran on an engine

    # Greedy on the strongest pool already: a second attempt would repeat the first, so none is made.
    key = _tenant(server, "block")
    body = _blocked(server, key, temperature=0)
    assert body["choices"][0]["message"]["refusal"] == REFUSAL
    assert "regenerated" not in body["grounding"]
    assert _requests_metered(server, key) == 1


def test_off_leaves_answers_unscored(server):
    key = _tenant(server, "off")
    client = openai_client(server.v1, key, timeout=120)
    answer = client.chat.completions.create(model="small", messages=_clip_question(), max_tokens=8)
    assert "grounding" not in answer.model_dump()
    time.sleep(3)  # a score, were one made, lands within about a second
    got = httpx.get(f"{server.v1}/usage/{answer.id}", headers={"authorization": f"Bearer {key}"}).json()
    assert got["grounding_score"] is None


# -- the Responses API: the same guardrail, through the same gate ------------------------------------------------


def _responses_input(parts: list[dict]) -> list[dict]:
    """The chat question's parts as a Responses API user message."""
    content = []
    for part in parts:
        if part["type"] == "image_url":
            content.append({"type": "input_image", "image_url": part["image_url"]["url"]})
        elif part["type"] == "input_audio":
            content.append({"type": "input_audio", "input_audio": part["input_audio"]})
        else:
            content.append({"type": "input_text", "text": part["text"]})
    return [{"role": "user", "content": content}]


def test_flag_puts_the_verdict_on_a_response_and_on_response_completed(server):
    key = _tenant(server, "flag")
    client = openai_client(server.v1, key, timeout=120)
    question = _responses_input(_image_question(_red_circle())[0]["content"])
    whole = client.responses.create(model="large", input=question, max_output_tokens=24).model_dump()
    verdict = whole["grounding"]
    assert set(verdict) == VERDICT_FIELDS
    assert verdict["evidence_scores"] == {"label_head": verdict["score"]}
    assert whole["output"][0]["content"][0]["type"] == "output_text"
    receipt = _receipt(server, key, lease_id(whole["id"]))
    assert (receipt["grounding_score"], receipt["grounding_passed"]) == (verdict["score"], verdict["passed"])

    events = list(client.responses.create(model="large", input=question, max_output_tokens=24, stream=True))
    done = events[-1].model_dump()
    assert done["type"] == "response.completed"
    streamed = _receipt(server, key, lease_id(done["response"]["id"]))
    assert done["response"]["grounding"]["score"] == streamed["grounding_score"]
    assert all("grounding" not in (e.model_dump().get("response") or {}) for e in events[:-1])


def test_block_regenerates_then_refuses_a_response_in_the_responses_shape(server):
    key = _tenant(server, "block")
    with httpx.Client(timeout=180) as http:
        resp = http.post(
            f"{server.v1}/responses",
            headers={"authorization": f"Bearer {key}"},
            json={
                "model": "small",
                "input": _responses_input(_clip_question()[0]["content"]),
                "max_output_tokens": 16,
                "temperature": 0.9,
            },
        )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "completed"
    assert [item["type"] for item in body["output"]] == ["message"]
    assert body["output"][0]["content"] == [{"type": "refusal", "refusal": REFUSAL}]
    assert body["grounding"]["regenerated"] is True
    assert body["grounding"]["passed"] is False
    assert _receipt(server, key, resp.headers["x-tessera-request-id"])["grounding_passed"] is False
    assert _requests_metered(server, key) == 2  # both attempts ran on an engine, metered as on chat
    assert lease_id(body["id"]) == resp.headers["x-tessera-request-id"]  # the response names the lease that answered
