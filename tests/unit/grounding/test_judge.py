"""The judge's pieces that need no engine: P(yes) from logprobs, its prompt, its questions and the combined score."""

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

import pytest

from demo.grounded_weights import write_judge_calibration
from grounding.checkable import CheckableClaim
from grounding.eval.metrics import ItemResult
from grounding.eval.routing import judge_calls
from grounding.guardrail import Verdict
from grounding.judge import (
    MAX_QUESTIONS,
    Judge,
    JudgedClaim,
    _best_medium,
    judge_messages,
    judge_request_id,
    planned_questions,
    question_for,
    yes_probability,
)
from grounding.models import JUDGE_FILE, JudgeThresholds, checkpoint_judge_thresholds
from grounding.open_questions import OpenQuestion
from grounding.scorer import GroundingResult, combine, each_evidence
from serving.engines.base import TokenLogprob


@pytest.mark.parametrize(
    ("token", "top", "expected"),
    [
        ("Yes", (("Yes", math.log(0.6)), ("No", math.log(0.2)), ("The", math.log(0.2))), 0.75),
        (" no", ((" no", math.log(0.5)), (" yes", math.log(0.5))), 0.5),
        ("YES.", (), 1.0),
        ("The", (("The", math.log(0.9)), ("A", math.log(0.1))), None),
    ],
)
def test_yes_probability_is_yes_over_yes_and_no(token, top, expected):
    logprob = TokenLogprob(token, top[0][1] if top else 0.0, top)
    assert yes_probability(logprob) == (None if expected is None else pytest.approx(expected))


@dataclass
class _Part:
    type: str
    text: str | None = None
    image_url: Any = None


@dataclass
class _Message:
    role: str
    content: Any


def test_the_judges_prompt_keeps_the_prefix_and_the_media_and_asks_instead():
    system = _Message("system", "Be brief.")
    image = _Part("image_url", image_url={"url": "data:image/png;base64,AAAA"})
    user = _Message("user", [_Part("text", "What is shown?"), image])
    later = _Message("assistant", "A square.")
    turns = judge_messages([system, user, later], "Is there a red square in the image? Answer yes or no.")
    assert turns[0] is system
    assert turns[1].role == "user"
    assert turns[1].content[0] is image
    assert turns[1].content[1].text == "Is there a red square in the image? Answer yes or no."
    assert len(turns) == 2  # nothing after the answered turn
    assert judge_messages([_Message("user", "hi")], "Q?")[0].content == "Q?"


def test_questions_and_request_ids():
    claim = CheckableClaim("object", "a giraffe by the window", "giraffe", (), "by the window")
    assert question_for(claim, "image", whole=False) == (
        "Is there a giraffe by the window in the image? Answer yes or no."
    )
    whole = CheckableClaim("object", "It looks nice.", "It looks nice.")
    assert question_for(whole, "audio", whole=True) == (
        'Is the following supported by the audio clip: "It looks nice."? Answer yes or no.'
    )
    assert judge_request_id("chatcmpl-1", 0) == judge_request_id("chatcmpl-1", 0) != judge_request_id("chatcmpl-1", 1)


def _judged(claim: str, p: float | None, threshold: float = 0.5) -> JudgedClaim:
    return JudgedClaim(claim, (f"{claim}?",), p, None if p is None else p >= threshold)


def test_combined_scores_count_every_claim_either_evidence_checked():
    label = GroundingResult(0.5, 2, ("a blue star",), ({"claim": "a red circle", "supported": True},))
    both = combine(label, [_judged("a giraffe", 0.1), _judged("the background", 0.9), _judged("a lamp", None)])
    assert both is not None
    assert (both.claims, both.score) == (4, 0.5)
    assert both.unsupported == ("a blue star", "a giraffe")
    assert [c["evidence"] for c in both.checked[1:]] == ["judge", "judge"]
    judge_only = combine(None, [_judged("a giraffe", 0.2), _judged("a circle", 0.8)])
    assert judge_only is not None
    assert (judge_only.score, judge_only.unsupported) == (0.5, ("a giraffe",))
    assert combine(None, [_judged("a lamp", None)]) is None  # no judgement: no made-up score
    assert combine(label, None) is label
    nothing_to_check = GroundingResult(1.0, 0, ())
    assert combine(nothing_to_check, [_judged("a giraffe", 0.1)]).score == 0.0  # type: ignore[union-attr]


def test_under_both_a_claim_the_label_head_checked_is_the_label_heads():
    label = GroundingResult(
        1.0, 2, (), ({"claim": "the circle is red", "supported": True},), about=frozenset({"circle", "shape", "mary"})
    )
    judged = [
        # the label head checked the circle and the count of shapes: the judge's doubts about them do not count
        dataclasses.replace(_judged("a red circle", 0.1), about=CheckableClaim("object", "", "circle").about()),
        dataclasses.replace(_judged("three shapes", 0.2), about=("shape",)),
        # a name the transcript said, and a colour heard of the speaker
        dataclasses.replace(_judged("Mary", 0.3), about=CheckableClaim("name", "Mary", "Mary").about()),
        # a giraffe is on no list: the judge's
        dataclasses.replace(_judged("a giraffe", 0.1), about=("giraffe",)),
    ]
    both = combine(label, judged)
    assert both is not None
    assert (both.claims, both.unsupported) == (3, ("a giraffe",))
    assert [c.get("evidence") for c in both.checked] == [None, "judge"]  # the label head's, then the judge's
    # each evidence alone still scores every claim it judged
    assert dict(each_evidence(label, judged))["judge"] == 0.0
    # a fact only heard is about its values too; a seen one about its thing alone
    heard = CheckableClaim("attribute", "my favourite colour is purple", "speaker's favourite colour", ("purple",))
    assert heard.about() == ("speaker's favourite colour", "purple")
    assert CheckableClaim("attribute", "the square is red", "square", ("red",)).about() == ("square",)
    assert CheckableClaim("time", "one o'clock", "one o'clock").about() == ("one o'clock", "1")
    assert CheckableClaim("time", "10:30", "10:30").about() == ("10:30", "10")


def test_each_evidence_that_spoke_scores_on_its_own():
    label = GroundingResult(0.5, 2, ("a blue star",), ({"claim": "a red circle", "supported": True},))
    judged = [_judged("a giraffe", 0.1), _judged("the background", 0.9), _judged("a circle", 0.7)]
    assert each_evidence(label, judged) == (("label_head", 0.5), ("judge", 2 / 3))
    assert each_evidence(None, judged) == (("judge", 2 / 3),)
    assert each_evidence(label, [_judged("a lamp", None)]) == (("label_head", 0.5),)
    assert each_evidence(None, None) == ()
    verdict = Verdict(0.6, 0.5, 5, (), by_evidence=each_evidence(label, judged))
    assert verdict.wire()["evidence_scores"] == {"label_head": 0.5, "judge": 0.6667}
    assert "evidence_scores" not in Verdict(0.6, 0.5, 5, ()).wire()


def test_a_claim_of_absence_is_supported_by_a_no():
    absent = JudgedClaim(
        "no green square", ("Is there a green square in the image? Answer yes or no.",), 0.2, True, True
    )
    assert absent.support == pytest.approx(0.8)
    wire = absent.wire()
    assert (wire["expected"], wire["support"], wire["p_yes"]) == ("no", 0.8, 0.2)
    present = JudgedClaim("a green square", (), 0.2, False)
    assert present.support == pytest.approx(0.2)
    assert present.wire()["expected"] == "yes"


@dataclass
class _Pool:
    judge_thresholds: JudgeThresholds | None = None


def test_the_thresholds_are_the_settings_else_the_checkpoints_calibrated_ones_else_a_half():
    calibrated = _Pool(JudgeThresholds(0.2, 0.4))
    assert Judge(None, None).thresholds_for(calibrated) == JudgeThresholds(0.2, 0.4)
    assert Judge(None, None).thresholds_for(_Pool()) == JudgeThresholds(0.5, 0.5)
    assert Judge(None, None, threshold=0.3).thresholds_for(calibrated) == JudgeThresholds(0.3, 0.3), "one for both"
    assert Judge(None, None, open_threshold=0.1).thresholds_for(calibrated) == JudgeThresholds(0.2, 0.1)
    assert Judge(None, None, threshold=0.3, open_threshold=0.1).thresholds_for(_Pool()) == JudgeThresholds(0.3, 0.1)


def test_a_claim_is_read_against_its_own_form_of_questions_threshold():
    thresholds = JudgeThresholds(yes_no=0.8, open=0.2)
    is_there = ("image", "Is there a square in the image?", None)
    where = OpenQuestion("Where is the square in the image?", "place", ("top",))
    # in the image: there (0.9) and at the top (0.3): 0.27, an open claim over its 0.2
    assert _best_medium([(*is_there, 0.9), ("image", where.text, where, 0.3)], False, thresholds) == (
        pytest.approx(0.27),
        "open",
    )
    # heard at 0.7 (under yes/no's 0.8), seen at 0.27 (over open's 0.2): the image speaks for it
    heard = ("audio", "Does the speaker mention a square?", None, 0.7)
    best, form = _best_medium([heard, (*is_there, 0.9), ("image", where.text, where, 0.3)], False, thresholds)
    assert (best, form) == (pytest.approx(0.27), "open")
    # a claim of absence: the highest P(yes) over media, yes/no
    assert _best_medium([heard, (*is_there, 0.9)], True, thresholds) == (0.9, "yes_no")
    assert _best_medium([(*is_there, None)], False, thresholds) == (None, "yes_no")
    verdict = JudgedClaim("The square is at the top.", (where.text,), 0.27, True, form="open")
    assert verdict.wire()["form"] == "open"


def test_a_checkpoint_carries_its_calibrated_thresholds_and_a_bad_file_is_refused(tmp_path):
    assert checkpoint_judge_thresholds(tmp_path) is None
    (tmp_path / "grounding").mkdir()
    path = tmp_path / JUDGE_FILE
    path.write_text(json.dumps({"threshold": 0.25, "recall": 0.5}))
    assert checkpoint_judge_thresholds(tmp_path) == JudgeThresholds(0.25, 0.25), "no open threshold: the same"
    path.write_text(json.dumps({"threshold": 0.25, "open_threshold": 0.1}))
    assert checkpoint_judge_thresholds(tmp_path) == JudgeThresholds(0.25, 0.1)
    bad_files = (
        '{"threshold": 1.0}',
        '{"threshold": true}',
        '{"margin": 0.2}',
        "not json",
        "[0.2]",
        '{"threshold": 0.2, "open_threshold": 0}',
    )
    for bad in bad_files:
        path.write_text(bad)
        with pytest.raises(ValueError, match=r"judge\.json"):
            checkpoint_judge_thresholds(tmp_path)


def test_build_writes_the_manifests_judge_calibration_beside_the_checkpoint(tmp_path):
    weights, manifest = tmp_path / "large-grounding.safetensors", tmp_path / "large-grounding.json"
    calibration = {"threshold": 0.2, "open_threshold": 0.3, "set": "calibration"}
    manifest.write_text(json.dumps({"config": {}, "judge_calibration": calibration}))
    write_judge_calibration(weights, tmp_path / "ckpt" / JUDGE_FILE)
    assert checkpoint_judge_thresholds(tmp_path / "ckpt") == JudgeThresholds(0.2, 0.3)
    manifest.write_text(json.dumps({"config": {}}))
    write_judge_calibration(weights, tmp_path / "other" / JUDGE_FILE)
    assert checkpoint_judge_thresholds(tmp_path / "other") is None


def test_the_planned_questions_are_every_question_of_every_claim_in_each_medium_carried():
    described = "The image shows a large red circle in the centre, on a light background."
    claims, asks = planned_questions(described, {"image"})
    assert [c.text for c in claims] == ["a large red circle in the centre", "a light background"]
    # the circle: is it there, its colour and its place (open); the background: is it there
    assert [(i, m) for i, m, _, _ in asks] == [(0, "image"), (0, "image"), (0, "image"), (1, "image")]
    assert sum(o is not None for *_, o in asks) == 2
    assert planned_questions("The image shows a large red circle in the centre.", set())[1] == []  # no medium
    _, whole = planned_questions("Yes.", {"image"})  # nothing checkable: the whole answer, once
    assert len(whole) == 1
    assert whole[0][3] is None
    many = ", ".join(f"a small red circle number {n}" for n in range(20))
    capped, _ = planned_questions(f"The image shows {many}.", {"image"})
    assert len(capped) <= MAX_QUESTIONS


def test_the_routing_eval_prices_every_question_the_judge_asked_not_only_those_it_decided():
    fields: dict[str, Any] = {
        "id": "x", "model": "small", "target": "image", "kind": "describe", "question": "q", "reference": "r",
        "answer": "The image shows a large red circle in the centre, on a light background.", "correct": True,
        "problems": [], "objects": [], "hallucinated": [], "yes_no": None, "expected": None, "flagged": False,
        "latency_s": 0.1,
    }  # fmt: skip
    # under `both` the label head decided every claim it read; the judge was asked about each all the same
    decided = [{"claim": "a large red circle in the centre", "evidence": "label_head", "supported": True}]
    assert judge_calls(ItemResult(mix="image", checked=decided, **fields)) == 4
    assert judge_calls(ItemResult(mix="text", **fields)) == 0
    assert judge_calls(ItemResult(mix="image", error="timeout", **fields)) == 0
