"""`tessera eval routing`'s report: every policy fitted on train, its thresholds chosen on dev, and only then
scored on test, with the curves, the intervals, the targets, and the router file the served policies read.

The policies, the cost model and the figures are grounding.eval.routing_policies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from grounding.eval.routing_policies import (
    COST_TARGET,
    EVIDENCES,
    QUALITY_SLACK,
    STRONG,
    WEAK,
    Costs,
    Decision,
    FittedRouter,
    Pair,
    bootstrap_gap,
    candidates_from,
    cascade,
    choose,
    curve_figures,
    evidence_auroc,
    figures,
    fit_router,
    heuristic,
    paired_gain,
    pgr,
    score,
    sweep,
)
from serving.prompt_router import CascadeGate

# -- every policy, on one set of answers --------------------------------------------------------------------------

Policy = tuple[Callable[[Pair], Decision], str | None]  # the decision, and the evidence its gate is costed by


def static_splits(slices: Sequence[str]) -> list[dict[str, Decision]]:
    """Every assignment of a pool to each slice."""
    splits: list[dict[str, Decision]] = [{}]
    for name in slices:
        splits = [{**s, name: d} for s in splits for d in (WEAK, STRONG)]
    return splits


def _split_policy(split: dict[str, Decision]) -> Callable[[Pair], Decision]:
    return lambda pair: split.get(pair.slice, STRONG)


def best_static(dev: Sequence[Pair], costs: Costs, max_cost: float) -> dict[str, Decision]:
    """The per-slice split most accurate on dev at no more than `max_cost` (ties to the cheaper)."""
    slices = sorted({p.slice for p in dev})
    scored = [(score(dev, _split_policy(s), costs), s) for s in static_splits(slices)]
    within = [(sc, s) for sc, s in scored if sc.cost <= max_cost + 1e-9] or [min(scored, key=lambda x: x[0].cost)]
    return max(within, key=lambda x: (x[0].accuracy, -x[0].cost))[1]


def fitted_policies(
    train: Sequence[Pair], dev: Sequence[Pair], costs: Costs, router: FittedRouter | None = None
) -> dict[str, tuple[Policy, dict[str, Any]]]:
    """Every policy with its thresholds fitted on train and chosen on dev: name -> ((decision, evidence), settings)."""
    found: dict[str, tuple[Policy, dict[str, Any]]] = {
        "always-weak": ((lambda _: WEAK, None), {}),
        "always-strong": ((lambda _: STRONG, None), {}),
        "heuristic": ((heuristic, None), {}),
        "oracle": ((lambda p: WEAK if p.weak_correct or not p.strong_correct else STRONG, None), {}),
    }
    router = router or fit_router(train)
    candidates = candidates_from([router.p_weak_right(p) for p in train])
    chosen = choose(train, dev, router.policy, costs, candidates)
    found["router"] = ((router.policy(chosen), None), {"threshold": chosen, "buckets": router.model.buckets})
    for evidence in EVIDENCES:
        scores = [p.weak_scores.get(evidence) for p in train if p.slice != "text"]
        for text_name, text in (("heuristic", heuristic), ("router", router.policy(chosen))):

            def make(
                t: float, e: str = evidence, place: Callable[[Pair], Decision] = text
            ) -> Callable[[Pair], Decision]:
                return cascade(e, t, place)

            threshold = choose(train, dev, make, costs, candidates_from(scores), evidence)
            name = f"cascade ({evidence}; text by {text_name})"
            settings = {"threshold": threshold, "evidence": evidence, "text": text_name}
            found[name] = ((make(threshold), evidence), settings)
    return found


def recommend(dev: Sequence[Pair], policies: dict[str, tuple[Policy, dict[str, Any]]], costs: Costs) -> str:
    """The policy to serve, chosen on dev: the cheapest within `QUALITY_SLACK` of always-strong at no more than
    `COST_TARGET`; else the most accurate at no more than `COST_TARGET`; else the most accurate. Never the oracle."""
    strong = score(dev, lambda _: STRONG, costs).accuracy
    scored = {
        name: score(dev, decide, costs, evidence)
        for name, ((decide, evidence), _) in policies.items()
        if name != "oracle"
    }
    meets = [(s.cost, n) for n, s in scored.items() if s.accuracy >= strong - QUALITY_SLACK and s.cost <= COST_TARGET]
    if meets:
        return min(meets)[1]
    affordable = [(s.accuracy, -s.cost, n) for n, s in scored.items() if s.cost <= COST_TARGET]
    return max(affordable or [(s.accuracy, -s.cost, n) for n, s in scored.items()])[2]


def fitted_cascade(
    dev: Sequence[Pair], policies: dict[str, tuple[Policy, dict[str, Any]]], costs: Costs
) -> CascadeGate:
    """The gate the served `cascade` policy checks with: the cascade `recommend` would choose on dev among the
    cascades alone (its evidence, threshold and what places its text)."""
    cascades = {name: found for name, found in policies.items() if name.startswith("cascade (")}
    settings = cascades[recommend(dev, cascades, costs)][1]
    return CascadeGate(settings["evidence"], float(settings["threshold"]), settings["text"])


def report(
    train: Sequence[Pair], dev: Sequence[Pair], test: Sequence[Pair], costs: Costs, seed: int = 0
) -> dict[str, Any]:
    """Every policy on test, per slice and overall, with the curve figures, the intervals and the targets."""
    router = fit_router(train)
    policies = fitted_policies(train, dev, costs, router)
    chosen = recommend(dev, policies, costs)
    (decide, evidence), _ = policies[chosen]
    slices = sorted({p.slice for p in test})
    weak = score(test, lambda _: WEAK, costs)
    strong = score(test, lambda _: STRONG, costs)
    table: dict[str, Any] = {}
    for name, ((policy, gate), settings) in policies.items():
        overall = score(test, policy, costs, gate)
        table[name] = {
            "settings": settings,
            "overall": {**figures(overall), "pgr": _round(pgr(overall.accuracy, weak.accuracy, strong.accuracy))},
            "by_slice": {s: figures(score([p for p in test if p.slice == s], policy, costs, gate)) for s in slices},
        }
    mine = score(test, decide, costs, evidence)
    share = mine.strong_share
    table["random (same strong share)"] = {
        "settings": {"strong_share": round(share, 4)},
        "overall": {
            "items": len(test),
            "accuracy": round((1 - share) * weak.accuracy + share * strong.accuracy, 4),
            "cost": round((1 - share) * costs.weak + share, 4),
            "strong_share": round(share, 4),
        },
    }
    dev_cost = score(dev, decide, costs, evidence).cost
    static = best_static(dev, costs, dev_cost)
    table["best static split"] = {
        "settings": {"split": static, "chosen_on": "dev, at no more than the chosen policy's dev cost"},
        "overall": figures(score(test, _split_policy(static), costs)),
    }
    curves = _curves(train, test, router, costs)
    gap = bootstrap_gap(test, decide, costs, evidence, seed)
    versus = {
        "heuristic": paired_gain(test, decide, heuristic, costs, evidence, seed),
        "best static split": paired_gain(test, decide, _split_policy(static), costs, evidence, seed),
    }
    by_slice_gap = {
        s: round(
            score([p for p in test if p.slice == s], lambda _: STRONG, costs).accuracy
            - score([p for p in test if p.slice == s], decide, costs, evidence).accuracy,
            4,
        )
        for s in slices
    }
    curve = curves.get(chosen) or curves.get("router") or {}
    targets = {
        "accuracy_within_1pt_at_60pct_cost": gap[0] <= QUALITY_SLACK and mine.cost <= COST_TARGET,
        "gap_upper_bound_at_most_2pt": gap[2] <= 0.02,
        "apgr_at_least_0.65": (curve.get("apgr") or 0.0) >= 0.65,
        "beats_heuristic_and_static_by_2pt": all(v[0] >= 0.02 and v[1] > 0 for v in versus.values()),
        "no_slice_3pt_below_strong": all(g <= 0.03 for g in by_slice_gap.values()),
        "strong_only_lost_at_most_3pct": mine.strong_only_lost <= 0.03,
    }
    return {
        "costs": {"weak": costs.weak, "strong": 1.0, "judge_call": costs.judge_call},
        "items": {"train": len(train), "dev": len(dev), "test": len(test)},
        "chosen": chosen,
        # what the chosen policy did with each test item, and what its gate cost there: the live confirmation
        # (grounding.eval.routing_live) compares the served policy with these, item by item
        "chosen_on_test": {
            p.id: {
                "decision": decide(p),
                "gate_cost": round(costs.judge_call * p.judge_calls if evidence in ("judge", "both") else 0.0, 4),
            }
            for p in test
        },
        "policies": table,
        "curves": curves,
        "gap_to_strong": {"mean": round(gap[0], 4), "ci95": [round(gap[1], 4), round(gap[2], 4)]},
        "gain_over": {k: {"mean": round(v[0], 4), "ci95": [round(v[1], 4), round(v[2], 4)]} for k, v in versus.items()},
        "gap_by_slice": by_slice_gap,
        "auroc_weak_errors": evidence_auroc(test),
        "router": dataclasses.replace(
            router.model,
            threshold=float(policies["router"][1]["threshold"]),
            fitted={"train": len(train), "dev": len(dev), "cost_ratio": costs.weak},
            cascade=fitted_cascade(dev, policies, costs),
        ).to_json(),
        "targets": {**targets, "met": all(targets.values())},
    }


def _curves(
    train: Sequence[Pair], test: Sequence[Pair], router: FittedRouter, costs: Costs
) -> dict[str, dict[str, Any]]:
    """Each thresholded policy swept over its train candidates on test (for the curve only; the served threshold
    was chosen on dev): its (strong share, cost, accuracy) points, APGR and CPT."""
    weak = score(test, lambda _: WEAK, costs).accuracy
    strong = score(test, lambda _: STRONG, costs).accuracy
    makers: dict[str, tuple[Callable[[float], Callable[[Pair], Decision]], list[float], str | None]] = {
        "router": (router.policy, candidates_from([router.p_weak_right(p) for p in train], (0.0, 1.01)), None)
    }
    for evidence in EVIDENCES:
        scores = [p.weak_scores.get(evidence) for p in train if p.slice != "text"]

        def make(t: float, e: str = evidence) -> Callable[[Pair], Decision]:
            return cascade(e, t)

        makers[f"cascade ({evidence}; text by heuristic)"] = (make, candidates_from(scores, (0.0, 1.01)), evidence)
    out: dict[str, dict[str, Any]] = {}
    for name, (policy_at, thresholds, gate) in makers.items():
        swept = sweep(test, policy_at, thresholds, costs, gate)
        points = [(s.strong_share, s.cost, s.accuracy) for _, s in swept]
        points += [(0.0, costs.weak, weak), (1.0, 1.0, strong)]
        figures_ = curve_figures([(share, acc) for share, _, acc in points], weak, strong)
        out[name] = {**figures_, "points": sorted({(round(a, 4), round(b, 4), round(c, 4)) for a, b, c in points})}
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
