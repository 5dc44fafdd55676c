"""The routing eval's offline half on answers whose outcomes are known: costs, decisions, fitting on train and dev
only, the curve figures, the intervals, and the policy it recommends."""

from __future__ import annotations

import pytest

from grounding.eval.routing_policies import (
    STRONG,
    WEAK,
    Costs,
    Pair,
    bootstrap_gap,
    cascade,
    choose,
    curve_figures,
    evidence_auroc,
    fit_router,
    heuristic,
    outcome,
    score,
)
from grounding.eval.routing_report import best_static, report
from serving.prompt_router import PromptRouter

COSTS = Costs(weak=0.25, judge_call=0.1)


def _pair(n: int, slice_: str, weak: bool, strong: bool = True, label: float | None = None, **kw) -> Pair:
    return Pair(
        id=f"{slice_}-{n}",
        slice=slice_,
        kind=kw.pop("kind", "describe"),
        question=kw.pop("question", "What is in the image?"),
        prompt_tokens=kw.pop("prompt_tokens", 80),
        weak_correct=weak,
        strong_correct=strong,
        weak_latency_s=kw.pop("weak_latency_s", 1.0),
        strong_latency_s=kw.pop("strong_latency_s", 3.0),
        weak_scores={"label_head": label, "judge": label, "both": label},
        judge_calls=kw.pop("judge_calls", 2),
    )


def test_each_decision_costs_what_the_cost_model_says():
    p = _pair(0, "image", weak=False, label=0.2)
    assert outcome(p, WEAK, COSTS) == (False, 0.25, 1.0)
    assert outcome(p, STRONG, COSTS) == (True, 1.0, 3.0)
    assert outcome(p, "kept", COSTS, "label_head") == (False, 0.25, 1.0)  # the label head costs no engine call
    correct, cost, latency = outcome(p, "escalated", COSTS, "judge")
    assert (correct, latency) == (True, 4.0)
    assert cost == pytest.approx(0.25 + 2 * 0.1 + 1.0)  # both pools, and two judge questions


def test_a_cascade_checks_media_and_places_text_by_the_heuristic():
    policy = cascade("label_head", 0.9)
    assert policy(_pair(0, "image", True, label=0.95)) == "kept"
    assert policy(_pair(1, "image", True, label=0.5)) == "escalated"
    assert policy(_pair(2, "audio", True, label=None)) == "escalated"  # no verdict: escalated, as served
    assert policy(_pair(3, "text", True, question="Hi")) == WEAK
    assert policy(_pair(4, "text", True, question="Explain step by step why the sky is blue")) == STRONG
    assert heuristic(_pair(5, "image", True, prompt_tokens=5000)) == STRONG


def test_the_threshold_is_chosen_on_dev_and_never_sees_test():
    # On dev the weak answers scoring 0.6 are right, so a threshold of 0.6 keeps them at the quality target.
    dev = [_pair(i, "image", weak=True, label=0.6) for i in range(10)] + [_pair(10, "image", False, label=0.3)]
    train = [_pair(i, "image", weak=i % 2 == 0, label=v) for i, v in enumerate((0.3, 0.6, 0.9))]

    def make(t: float):
        return cascade("label_head", t)

    assert choose(train, dev, make, COSTS, [0.3, 0.6, 0.9]) == 0.6


def test_curve_figures_follow_routellm():
    # the whole gap recovered with half the calls on the strong pool, linearly on the way there
    figures = curve_figures([(0.0, 0.5), (0.5, 0.9), (1.0, 0.9)], weak=0.5, strong=0.9)
    assert figures["apgr"] == pytest.approx(0.75, abs=0.01)
    assert (figures["cpt50"], figures["cpt80"]) == (0.25, 0.4)
    # a straight line between the two pools: the random router, APGR one half
    line = [(i / 10, 0.5 + 0.4 * i / 10) for i in range(11)]
    assert curve_figures(line, 0.5, 0.9)["apgr"] == pytest.approx(0.5, abs=0.03)
    assert curve_figures(line, 0.9, 0.9) == {"apgr": None, "cpt50": None, "cpt80": None}


def test_bootstrap_interval_of_a_policy_identical_to_the_strong_one_is_zero():
    pairs = [_pair(i, "image", weak=i % 3 == 0, strong=i % 5 != 0) for i in range(30)]
    assert bootstrap_gap(pairs, lambda _: STRONG, COSTS, None, seed=1) == (0.0, 0.0, 0.0)
    mean, low, high = bootstrap_gap(pairs, lambda _: WEAK, COSTS, None, seed=1)
    assert low <= mean <= high
    assert mean == pytest.approx(sum(p.strong_correct - p.weak_correct for p in pairs) / 30)


def test_the_router_learns_which_slice_the_weak_pool_gets_right():
    train = [_pair(i, "text", weak=True, question="Hi") for i in range(20)]
    train += [_pair(i, "image", weak=False) for i in range(20)]
    router = fit_router(train)
    assert router.p_weak_right(train[0]) > 0.8
    assert router.p_weak_right(train[-1]) < 0.2


def test_the_best_static_split_keeps_to_its_cost():
    dev = [_pair(i, "text", weak=True, question="Hi") for i in range(10)]
    dev += [_pair(i, "image", weak=False) for i in range(10)]
    assert best_static(dev, COSTS, max_cost=0.7) == {"text": WEAK, "image": STRONG}
    assert best_static(dev, COSTS, max_cost=0.25) == {"text": WEAK, "image": WEAK}


def test_auroc_per_evidence_reads_the_weak_answers_scores():
    pairs = [
        _pair(0, "image", True, label=0.9),
        _pair(1, "image", False, label=0.1),
        _pair(2, "image", True, label=0.8),
    ]
    table = evidence_auroc(pairs)
    assert table["image"]["label_head"] == 1.0
    assert table["overall"]["both"] == 1.0


def _world(offset: int, n: int) -> list[Pair]:
    """The weak pool is right on simple text and on media it grounds well (label score 0.95), wrong on complex
    text and on media it grounds badly (0.2); the strong pool is right everywhere."""
    pairs = []
    for i in range(offset, offset + n):
        pairs.append(_pair(i, "text", weak=True, question="Name a colour.", kind="simple"))
        pairs.append(_pair(i, "text", weak=False, question="Explain why the sky is blue.", kind="why"))
        for media in ("image", "audio"):
            good = i % 4 != 0
            pairs.append(_pair(i, media, weak=good, label=0.95 if good else 0.2))
    return [Pair(**{**p.__dict__, "id": f"{p.id}-{k}"}) for k, p in enumerate(pairs)]


def test_the_report_recommends_the_cascade_that_meets_the_targets_and_scores_everything_on_test():
    found = report(_world(0, 40), _world(100, 30), _world(200, 50), COSTS, seed=3)
    chosen = found["chosen"]
    assert chosen.startswith("cascade (label_head")  # the cheapest gate that reaches the strong pool's accuracy
    row = found["policies"][chosen]["overall"]
    assert row["accuracy"] == 1.0
    assert row["cost"] < 0.6
    assert found["gap_to_strong"] == {"mean": 0.0, "ci95": [0.0, 0.0]}
    assert found["targets"]["met"], found["targets"]
    assert found["policies"]["always-strong"]["overall"]["cost"] == 1.0
    assert found["policies"]["always-weak"]["overall"]["cost"] == 0.25
    random = found["policies"]["random (same strong share)"]["overall"]
    assert random["strong_share"] == row["strong_share"]
    assert random["accuracy"] < row["accuracy"]
    assert found["auroc_weak_errors"]["image"]["label_head"] == 1.0
    assert set(found["curves"]) >= {"router", "cascade (label_head; text by heuristic)"}
    assert found["curves"]["cascade (label_head; text by heuristic)"]["apgr"] > 0.65
    served = PromptRouter.from_json(found["router"])  # the file `--router-out` writes
    assert served.threshold == found["policies"]["router"]["settings"]["threshold"]
    assert served.fitted == {"train": 160, "dev": 120, "cost_ratio": COSTS.weak}  # four items for each i
    assert served.cascade is not None
    chosen_settings = found["policies"][chosen]["settings"]
    assert (served.cascade.evidence, served.cascade.threshold, served.cascade.text) == (
        chosen_settings["evidence"],
        chosen_settings["threshold"],
        chosen_settings["text"],
    )  # the chosen policy is a cascade here, so the served cascade is that one


def test_the_oracle_is_reported_but_never_recommended():
    found = report(_world(0, 10), _world(100, 10), _world(200, 10), COSTS)
    assert found["policies"]["oracle"]["overall"]["accuracy"] == 1.0
    assert found["chosen"] != "oracle"
    assert score([], lambda _: WEAK, COSTS).items == 0
