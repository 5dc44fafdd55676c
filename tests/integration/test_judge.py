"""The judge as grounding evidence on the live server: yes/no and open questions about the request's media, asked
through the lease, metered to the tenant as grounding lines, scoring answers where the label head is switched
off."""

from __future__ import annotations

import httpx
import pytest

from demo.world import Scene, Shape, png_bytes
from grounding.judge import judge_request_id
from grounding.models import checkpoint_judge_thresholds
from grounding.open_questions import ANSWER_TOKENS
from tests import media
from tests.admin import new_tenant
from tests.conftest import MODELS_DIR
from tests.openai_wire import openai_client


def _image_turn(question: str) -> list[dict]:
    scene = Scene(320, 240, (250, 250, 250), 0.0, 0, (Shape("square", "blue", "large", "centre", 160, 120, 60),))
    parts = [
        {"type": "image_url", "image_url": {"url": media.data_url(png_bytes(scene), "image/png")}},
        {"type": "text", "text": question},
    ]
    return [{"role": "system", "content": "Answer in one sentence."}, {"role": "user", "content": parts}]


def _receipt(server, key: str, request_id: str) -> dict:
    got = httpx.get(f"{server.v1}/usage/{request_id}", headers={"authorization": f"Bearer {key}"}, timeout=30)
    assert got.status_code == 200, got.text
    return got.json()


def test_judge_only_evidence_scores_an_image_answer_and_bills_its_questions(server):
    key = new_tenant(server, "judge", grounding_policy="flag", grounding_evidence="judge", concurrent_requests=1)
    client = openai_client(server.v1, key, timeout=180)
    answer = client.chat.completions.create(
        model="large", messages=_image_turn("What is in this image?"), max_tokens=16, temperature=0
    )
    verdict = answer.model_dump()["grounding"]
    checked = verdict["checked_claims"]
    assert checked, verdict
    assert {c["evidence"] for c in checked} == {"judge"}
    thresholds = checkpoint_judge_thresholds(MODELS_DIR / "large")  # the demo's, which build-demo writes
    assert thresholds is not None
    for c in checked:  # a claim of absence holds on a no
        assert 0.0 <= c["p_yes"] <= 1.0, c
        assert c["support"] == pytest.approx(c["p_yes"] if c["expected"] == "yes" else 1 - c["p_yes"], abs=2e-4), c
        assert c["form"] in ("yes_no", "open"), c
        assert c["supported"] is (c["support"] >= thresholds.of(c["form"])), c
    supported = sum(c["supported"] for c in checked)
    assert verdict["claims"] == len(checked)
    assert verdict["score"] == round(supported / len(checked), 4)
    assert sorted(verdict["unsupported_claims"]) == sorted(c["claim"] for c in checked if not c["supported"])
    # Each question is a grounding line of the tenant's, on the answering pool, its image from the embedding cache.
    first = _receipt(server, key, judge_request_id(answer.id, 0))
    assert (first["endpoint"], first["model"], first["status"]) == ("grounding", "large", "completed")
    assert 1 <= first["tokens"]["output"] <= ANSWER_TOKENS  # a yes/no question's one token, or an open answer
    assert first["tokens"]["image"] > 0
    assert first["tokens"]["cached_image"] == first["tokens"]["image"]
    assert first["grounding_score"] is None  # a judge's question is never scored itself
    answered = _receipt(server, key, answer.id)
    assert answered["endpoint"] == "chat"
    assert answered["grounding_score"] == verdict["score"]


def test_label_head_evidence_stays_the_default_and_asks_no_judge(server):
    key = new_tenant(server, "label", grounding_policy="flag")
    client = openai_client(server.v1, key, timeout=180)
    answer = client.chat.completions.create(
        model="large", messages=_image_turn("What shape and colour is in this image?"), max_tokens=16, temperature=0
    )
    checked = answer.model_dump()["grounding"]["checked_claims"]
    assert checked
    assert {c["evidence"] for c in checked} == {"label_head"}
    missing = httpx.get(
        f"{server.v1}/usage/{judge_request_id(answer.id, 0)}", headers={"authorization": f"Bearer {key}"}, timeout=30
    )
    assert missing.status_code == 404


def _forced(client, messages: list[dict], answer: str):
    """The pool made to give `answer` (vLLM's structured_outputs choice), so the guardrail judges a chosen answer."""
    return client.chat.completions.create(
        model="large",
        messages=messages,
        max_tokens=64,
        temperature=0,
        extra_body={"structured_outputs": {"choice": [answer]}},
    )


def _judged_claims(client, answer: str) -> tuple[dict, dict]:
    got = _forced(client, _image_turn("What is in this image?"), answer)
    assert got.choices[0].message.content == answer
    verdict = got.model_dump()["grounding"]
    return verdict, {c["claim"]: c for c in verdict["checked_claims"]}


def test_the_judge_reads_claims_in_words_on_no_list(server):
    """Judge-only evidence on an image of one blue square: a thing no list names ("a giraffe by the window") is
    unsupported, a true one in words no checker knows ("the background is light") is supported, and a right
    answer is not flagged."""
    key = new_tenant(server, "words", grounding_policy="flag", grounding_evidence="judge")
    client = openai_client(server.v1, key, timeout=180)
    verdict, by_claim = _judged_claims(client, "There is a giraffe by the window. The background is light.")
    assert by_claim["a giraffe by the window"]["supported"] is False, by_claim
    assert by_claim["The background is light"]["supported"] is True, by_claim
    assert verdict["flagged"] is True
    right, _ = _judged_claims(client, "A blue square on a light background.")
    assert right["flagged"] is False, right


def test_the_judge_catches_a_wrong_colour_count_or_place(server):
    """About one large blue square in the centre, each wrong value is asked openly ("What colour is the square in
    the image?") and unsupported, and the right ones are supported."""
    key = new_tenant(server, "values", grounding_policy="flag", grounding_evidence="judge")
    client = openai_client(server.v1, key, timeout=180)
    verdict, by_claim = _judged_claims(client, "The square is red.")
    assert by_claim["The square is red"]["supported"] is False, by_claim
    assert verdict["flagged"] is True
    _, by_claim = _judged_claims(client, "There are three shapes. The blue square is at the top.")
    assert by_claim["three shapes"]["supported"] is False, by_claim
    assert by_claim["The blue square is at the top"]["supported"] is False, by_claim
    right, by_claim = _judged_claims(client, "There is one shape. The blue square is in the centre.")
    assert by_claim["one shape"]["supported"] is True, by_claim
    placed = by_claim["The blue square is in the centre"]
    assert "Where is the blue square in the image?" in placed["questions"], placed
    assert right["flagged"] is False, right
