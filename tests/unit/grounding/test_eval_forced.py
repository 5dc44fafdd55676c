"""The guardrail on forced answers: which come back usable, recall and false flags per evidence and slice, the
judge's threshold chosen on a calibration split, and the gate on them."""

import collections

import numpy as np
import pytest

from demo.golden import golden_set
from demo.wrong_answers import one_fact_changed
from grounding.eval.forced import calibrate_judge, forced_figures, forced_items, run_forced
from grounding.eval.metrics import ItemResult, gate, summarise
from tests.unit.grounding.test_eval import result


def forced(kind, correct, flagged, scores=None, mix="image", p_yes=(), forms=()) -> ItemResult:
    r = result(mix=mix, correct=correct, flagged=flagged)
    checked = [{"claim": f"c{i}", "evidence": "judge", "supported": p >= 0.5, "p_yes": p} for i, p in enumerate(p_yes)]
    for claim, form in zip(checked, forms, strict=False):
        claim["form"] = form
    return ItemResult(**{**r.__dict__, "forced": kind, "evidence_scores": scores, "threshold": 0.9, "checked": checked})


def test_forced_figures_per_evidence_and_slice_count_only_usable_answers():
    made = [
        forced("wrong", False, True, {"label_head": 0.5, "judge": 1.0}),
        forced("wrong", False, True, {"label_head": 1.0, "judge": 0.0}),
        forced("right", True, False, {"label_head": 1.0, "judge": 1.0}),
        forced("right", True, True, {"label_head": 1.0, "judge": 0.5}, mix="audio"),
        forced("wrong", True, False),  # a "wrong" answer the suite's judge accepts: measures nothing
        forced("right", True, None),  # no verdict came back
    ]
    figures = forced_figures(made)
    assert (figures["sent"], figures["usable"]) == (6, 4)
    overall = figures["overall"]
    assert (overall["right"], overall["wrong"]) == (2, 2)
    assert overall["served"] == {"precision": 0.6667, "recall": 1.0, "false_flag_rate": 0.5}
    assert overall["label_head"] == {"precision": 1.0, "recall": 0.5, "false_flag_rate": 0.0}
    assert overall["judge"] == {"precision": 0.5, "recall": 0.5, "false_flag_rate": 0.5}
    assert figures["by_mix"]["audio"]["served"]["false_flag_rate"] == 1.0
    assert gate(summarise([result(objects=["circle"])] * 10), figures) == [
        "guardrail false flags on right answers 0.5 > 0.05"
    ]
    silent = forced_figures([forced("right", True, None)])
    assert gate(summarise([result(objects=["circle"])] * 10), silent) == [], "no usable answer: nothing to gate"


def test_judge_threshold_is_chosen_for_recall_within_the_false_flag_limit():
    answers = [
        forced("wrong", False, True, p_yes=(0.9, 0.3)),  # flagged at any threshold above 0.3
        forced("wrong", False, True, p_yes=(0.9, 0.6)),  # flagged only above 0.6
        *[forced("right", True, False, p_yes=(0.95, 0.7)) for _ in range(20)],  # flagged above 0.7
    ]
    calibration = calibrate_judge(answers)
    assert calibration is not None
    assert calibration["answers"] == 22
    chosen = calibration["chosen"]
    assert chosen["threshold"] == 0.65  # both wrong answers flagged, no right one
    assert chosen["open_threshold"] == 0.5  # no open claim: every one does as well, and the middle is chosen
    assert (chosen["recall"], chosen["false_flag_rate"]) == (1.0, 0.0)
    assert calibrate_judge([forced("right", True, False)]) is None, "no P(yes) given: nothing to calibrate"


def test_yes_no_and_open_thresholds_are_chosen_together():
    """A wrong answer caught on its yes/no claim (P(yes) 0.6) needs a yes/no threshold above 0.6, which a right
    answer's open claim (0.4) would not clear: one threshold for both forms catches only one of the two wrong
    answers without flagging every right one."""
    forms = ("yes_no", "open")
    answers = [
        forced("wrong", False, True, p_yes=(0.6, 0.9), forms=forms),
        forced("wrong", False, True, p_yes=(0.9, 0.2), forms=forms),
        *[forced("right", True, False, p_yes=(0.95, 0.4), forms=forms) for _ in range(20)],
    ]
    calibration = calibrate_judge(answers)
    assert calibration is not None
    chosen = calibration["chosen"]
    # yes/no 0.65 to 0.95 and open 0.25 to 0.4 all do: the middle of each
    assert (chosen["threshold"], chosen["open_threshold"]) == (0.8, 0.3)
    assert (chosen["recall"], chosen["false_flag_rate"]) == (1.0, 0.0)
    one = [r for r in calibration["one"] if r["false_flag_rate"] <= 0.05]
    assert max(r["recall"] for r in one) == 0.5


def test_forced_run_sends_each_items_right_and_wrong_answer():
    items = golden_set("calibration")
    chosen = forced_items(items, 12)
    assert len(chosen) == 12
    assert {i.mix for i in chosen} == {"image", "audio", "image+audio"}
    spread = collections.Counter(i.mix for i in forced_items(items[:120], 75))  # not the first 75
    assert spread == {"image": 38, "audio": 37}
    assert len(forced_items(items, 10_000)) == len(items)
    sent: list[tuple[str, str]] = []

    def ask(item, answer):
        sent.append(answer)
        return forced(answer[0], answer[0] == "right", answer[0] == "wrong")

    made = run_forced(ask, chosen[:3], lambda i: one_fact_changed(i, np.random.default_rng(i.seed)), progress=print)
    assert [kind for kind, _ in sent] == ["right"] * 3 + ["wrong"] * 3
    assert [text for _, text in sent[:3]] == [i.answer for i in chosen[:3]]
    assert all(w != r for (_, w), (_, r) in zip(sent[3:], sent[:3], strict=True))
    assert forced_figures(made)["overall"]["served"]["recall"] == 1.0
    assert run_forced(ask, chosen, str, progress=print, expired=lambda: True) == []


@pytest.mark.parametrize("name", ["heldout", "free", "calibration"])
def test_every_golden_item_has_a_wrong_answer_the_checker_rejects(name):
    from demo.answers import check_answer

    items = golden_set(name)
    for item in items[:: max(1, len(items) // 120)]:
        wrong = one_fact_changed(item, np.random.default_rng(item.seed))
        assert check_answer(item, item.answer).correct, item.id
        assert not check_answer(item, wrong).correct, (item.id, item.answer, wrong)
