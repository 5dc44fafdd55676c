"""The guardrail's policy table: what each tenant policy does with a verdict."""

from __future__ import annotations

import pytest

from grounding.guardrail import POLICIES, REFUSAL, Verdict, decide, scores, waits_for_verdict

PASS = Verdict(score=0.95, threshold=0.9, claims=20, unsupported=("a woman",))
FAIL = Verdict(score=0.5, threshold=0.9, claims=2, unsupported=("on Friday",))


@pytest.mark.parametrize(
    ("policy", "verdict", "streamed", "attempt", "action"),
    [
        ("off", FAIL, False, 0, "none"),
        ("score", FAIL, False, 0, "none"),
        ("flag", FAIL, False, 0, "annotate"),
        ("flag", PASS, True, 0, "annotate"),
        ("block", PASS, False, 0, "annotate"),
        ("block", FAIL, False, 0, "regenerate"),
        ("block", FAIL, False, 1, "refuse"),
        ("block", PASS, False, 1, "annotate"),
        ("block", FAIL, True, 0, "annotate"),  # a stream cannot be taken back
        ("block", None, False, 0, "none"),  # nothing to ground it with
        ("flag", None, True, 0, "none"),
    ],
)
def test_each_policy_acts_on_a_verdict(policy, verdict, streamed, attempt, action):
    assert decide(policy, verdict, streamed=streamed, attempt=attempt) == action


def test_which_policies_score_and_which_wait():
    assert [p for p in POLICIES if scores(p)] == ["score", "flag", "block"]
    assert [p for p in POLICIES if waits_for_verdict(p)] == ["flag", "block"]


def test_the_threshold_decides_and_the_wire_form_says_why():
    assert PASS.passed
    assert not FAIL.passed
    assert Verdict(0.9, 0.9, 10, ()).passed  # reaching the threshold is enough
    wire = FAIL.wire(regenerated=True)
    assert wire == {
        "score": 0.5,
        "threshold": 0.9,
        "passed": False,
        "flagged": True,
        "claims": 2,
        "unsupported_claims": ["on Friday"],
        "checked_claims": [],
        "regenerated": True,
    }
    assert "regenerated" not in PASS.wire()
    assert "grounded" in REFUSAL
