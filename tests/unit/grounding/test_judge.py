"""The judge's pieces that need no engine: P(yes) from logprobs, its prompt, its questions and the combined score."""

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

import pytest

from demo.grounded_weights import write_judge_calibration
from grounding.checkable import CheckableClaim
from grounding.guardrail import Verdict
from grounding.judge import Judge, JudgedClaim, judge_messages, judge_request_id, question_for, yes_probability
from grounding.models import JUDGE_FILE, checkpoint_judge_threshold
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
    judge_threshold: float | None = None


def test_the_threshold_is_the_setting_else_the_checkpoints_calibrated_one_else_a_half():
    assert Judge(None, None, threshold=0.3).threshold_for(_Pool(0.2)) == 0.3
    assert Judge(None, None).threshold_for(_Pool(0.2)) == 0.2
    assert Judge(None, None).threshold_for(_Pool()) == 0.5


def test_a_checkpoint_carries_its_calibrated_threshold_and_a_bad_file_is_refused(tmp_path):
    assert checkpoint_judge_threshold(tmp_path) is None
    (tmp_path / "grounding").mkdir()
    path = tmp_path / JUDGE_FILE
    path.write_text(json.dumps({"threshold": 0.25, "recall": 0.5}))
    assert checkpoint_judge_threshold(tmp_path) == 0.25
    for bad in ('{"threshold": 1.0}', '{"threshold": true}', '{"margin": 0.2}', "not json"):
        path.write_text(bad)
        with pytest.raises(ValueError, match=r"judge\.json"):
            checkpoint_judge_threshold(tmp_path)


def test_build_writes_the_manifests_judge_calibration_beside_the_checkpoint(tmp_path):
    weights, manifest = tmp_path / "large-grounding.safetensors", tmp_path / "large-grounding.json"
    manifest.write_text(json.dumps({"config": {}, "judge_calibration": {"threshold": 0.2, "set": "calibration"}}))
    write_judge_calibration(weights, tmp_path / "ckpt" / JUDGE_FILE)
    assert checkpoint_judge_threshold(tmp_path / "ckpt") == 0.2
    manifest.write_text(json.dumps({"config": {}}))
    write_judge_calibration(weights, tmp_path / "other" / JUDGE_FILE)
    assert checkpoint_judge_threshold(tmp_path / "other") is None
