"""`tessera eval routing`'s offline half: every policy scored on the same cached answers of both pools.

Each item of a split was answered once by the weak pool and once by the strong one (grounding.eval.routing); a
`Pair` holds both outcomes and the weak answer's grounding scores. A policy decides per item, from what it may
know, whether the weak answer stands, the strong pool answers instead of it, or (a cascade) the weak pool answers,
its grounding is checked, and the strong pool answers only if the check fails. Nothing is asked of a model here.

Cost model: a request to the weak pool costs `c_weak`, to the strong one 1.0 (engine seconds per request, as
`tessera bench cost` measures them, divided by the strong pool's), so always-strong costs 1.0 and always-weak r.
An escalated cascade item costs both, plus its gate: the label head rides on the encoder's own embeddings (no
engine call), the judge asks the strong pool one short question per claim (`judge_call` each).

Fitting (grounding.eval.routing_report): thresholds are fitted on train, chosen on dev, and only then applied to
test; nothing is fitted on test. The figures follow RouteLLM: PGR (the share of the weak-to-strong accuracy gap a
policy recovers), APGR (PGR averaged over the share of strong calls, 0 to 100%), CPT(x) (the least share of
strong calls that recovers x of the gap).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grounding.eval.metrics import auroc
from serving.prompt_router import DEFAULT_BUCKETS, PromptRouter, router_features
from serving.routing import AUTO, PoolView, RouteRequest, route

EVIDENCES = ("label_head", "judge", "both")
WEAK, STRONG = "weak", "strong"
QUALITY_SLACK = 0.01  # a policy meets the quality target within 1 point of always-strong
COST_TARGET = 0.6  # ... at no more than 60% of its cost
BOOTSTRAP = 1000


@dataclass(frozen=True)
class Pair:
    """One item answered by both pools: what a policy may read before answering (slice, question, prompt size),
    and after the weak answer (its grounding score per evidence, the judge calls it took). `kind` (the generator's
    question kind) is for reading the results only: a served request carries no such label, so no policy reads it."""

    id: str
    slice: str
    kind: str
    question: str
    prompt_tokens: int
    weak_correct: bool
    strong_correct: bool
    weak_latency_s: float
    strong_latency_s: float
    weak_scores: dict[str, float | None] = field(default_factory=dict)  # label_head, judge, both
    judge_calls: int = 0  # the judge's questions about the weak answer


@dataclass(frozen=True)
class Costs:
    weak: float  # r: a weak request's cost, the strong one's being 1.0
    judge_call: float = 0.0  # one judge question on the strong pool


# -- a decision per item ---------------------------------------------------------------------------------------

# "weak", "strong", or a cascade's "kept" (weak answered, checked, stood) / "escalated" (weak, checked, strong).
Decision = str


def outcome(pair: Pair, decision: Decision, costs: Costs, evidence: str | None = None) -> tuple[bool, float, float]:
    """(correct, cost, latency) of `pair` under `decision`; a cascade's gate is costed by `evidence`."""
    gate = costs.judge_call * pair.judge_calls if evidence in ("judge", "both") else 0.0
    if decision == WEAK:
        return pair.weak_correct, costs.weak, pair.weak_latency_s
    if decision == STRONG:
        return pair.strong_correct, 1.0, pair.strong_latency_s
    if decision == "kept":
        return pair.weak_correct, costs.weak + gate, pair.weak_latency_s
    return pair.strong_correct, costs.weak + gate + 1.0, pair.weak_latency_s + pair.strong_latency_s


# -- policies ----------------------------------------------------------------------------------------------------

POOLS = (
    PoolView("weak", (), ("text", "image", "audio"), 0, lambda: 1.0),
    PoolView("strong", (), ("text", "image", "audio"), 1, lambda: 1.0),
)


def heuristic(pair: Pair) -> Decision:
    """What the served `heuristic` policy would do (serving.routing.route, both pools idle)."""
    modalities = (
        {"text"} | ({"image"} if "image" in pair.slice else set()) | ({"audio"} if "audio" in pair.slice else set())
    )
    name, _ = route(RouteRequest(AUTO, modalities, pair.prompt_tokens, pair.question), POOLS)
    return WEAK if name == "weak" else STRONG


def cascade(
    evidence: str, threshold: float, text: Callable[[Pair], Decision] = heuristic
) -> Callable[[Pair], Decision]:
    """Media: the weak answer stands when its `evidence` score reaches `threshold` (no score: escalated, as served);
    text, which has no grounding, is placed by `text` before it is answered."""

    def decide(pair: Pair) -> Decision:
        if pair.slice == "text":
            return text(pair)
        score = pair.weak_scores.get(evidence)
        return "kept" if score is not None and score >= threshold else "escalated"

    return decide


class FittedRouter:
    """The served router (serving.prompt_router) read on pairs: what it knows of an item before answering is the
    item's slice, question, prompt size and the heuristic's word; each item's probability is worked out once."""

    def __init__(self, model: PromptRouter) -> None:
        self.model = model
        self._seen: dict[tuple[str, str, str], float] = {}

    def p_weak_right(self, pair: Pair) -> float:
        key = (pair.id, pair.slice, pair.question)
        if key not in self._seen:
            strong = heuristic(pair) == STRONG
            self._seen[key] = self.model.p_weak_right(pair.slice, pair.question, pair.prompt_tokens, strong)
        return self._seen[key]

    def policy(self, threshold: float) -> Callable[[Pair], Decision]:
        return lambda pair: WEAK if self.p_weak_right(pair) >= threshold else STRONG


def fit_router(
    train: Sequence[Pair], steps: int = 2000, lr: float = 0.5, l2: float = 1e-3, buckets: int = DEFAULT_BUCKETS
) -> FittedRouter:
    """Logistic regression by gradient descent (a few dozen features, a few hundred items); its threshold is
    chosen later, on dev (`fitted_policies`)."""
    rows = [router_features(p.slice, p.question, p.prompt_tokens, heuristic(p) == STRONG, buckets) for p in train]
    x = np.array(rows)
    y = np.array([float(p.weak_correct) for p in train])
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -30, 30)))
        w -= lr * (x.T @ (p - y) / len(y) + l2 * w)
    return FittedRouter(PromptRouter(tuple(float(v) for v in w), threshold=0.5, buckets=buckets))


# -- scoring -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scored:
    """A policy's figures on a set of pairs."""

    items: int
    accuracy: float
    cost: float  # mean per request, always-strong = 1.0
    strong_share: float  # requests that called the strong pool (escalations included)
    escalation_rate: float  # of the media items a cascade checked, the share it escalated
    p50_latency_s: float
    p95_latency_s: float
    strong_only_lost: float  # items only the strong pool got right, answered wrong


def score(
    pairs: Sequence[Pair], policy: Callable[[Pair], Decision], costs: Costs, evidence: str | None = None
) -> Scored:
    decisions = [policy(p) for p in pairs]
    outcomes = [outcome(p, d, costs, evidence) for p, d in zip(pairs, decisions, strict=True)]
    checked = [d for d in decisions if d in ("kept", "escalated")]
    latencies = sorted(o[2] for o in outcomes)
    lost = sum(1 for p, o in zip(pairs, outcomes, strict=True) if p.strong_correct and not p.weak_correct and not o[0])
    n = max(1, len(pairs))
    return Scored(
        items=len(pairs),
        accuracy=sum(o[0] for o in outcomes) / n,
        cost=sum(o[1] for o in outcomes) / n,
        strong_share=sum(d in (STRONG, "escalated") for d in decisions) / n,
        escalation_rate=(sum(d == "escalated" for d in checked) / len(checked)) if checked else 0.0,
        p50_latency_s=_quantile(latencies, 0.5),
        p95_latency_s=_quantile(latencies, 0.95),
        strong_only_lost=lost / n,
    )


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def pgr(accuracy: float, weak: float, strong: float) -> float | None:
    """The share of the weak-to-strong gap recovered; None when the strong pool is no better."""
    return (accuracy - weak) / (strong - weak) if strong > weak else None


def curve_figures(points: Sequence[tuple[float, float]], weak: float, strong: float) -> dict[str, float | None]:
    """APGR and CPT(50%), CPT(80%) from (strong-call share, accuracy) points. The best accuracy reached with at
    most each share of strong calls is interpolated linearly between the points (two thresholds mixed at random
    reach any point between them), and PGR is averaged over shares 0, 0.01, ... 1."""
    if strong <= weak or not points:
        return {"apgr": None, "cpt50": None, "cpt80": None}
    ordered = sorted(points)
    shares, best, reached = [0.0], [weak], weak
    for share, accuracy in ordered:
        reached = max(reached, accuracy)
        shares.append(share)
        best.append(reached)
    grid = np.linspace(0.0, 1.0, 101)
    curve = np.clip((np.interp(grid, shares, best) - weak) / (strong - weak), 0.0, 1.0)

    def cpt(x: float) -> float | None:
        return next((round(float(s), 2) for s, value in zip(grid, curve, strict=True) if value >= x - 1e-9), None)

    return {"apgr": round(float(curve.mean()), 4), "cpt50": cpt(0.5), "cpt80": cpt(0.8)}


def sweep(
    pairs: Sequence[Pair],
    make: Callable[[float], Callable[[Pair], Decision]],
    thresholds: Sequence[float],
    costs: Costs,
    evidence: str | None = None,
) -> list[tuple[float, Scored]]:
    return [(t, score(pairs, make(t), costs, evidence)) for t in thresholds]


def choose(
    train: Sequence[Pair],
    dev: Sequence[Pair],
    make: Callable[[float], Callable[[Pair], Decision]],
    costs: Costs,
    candidates: Sequence[float],
    evidence: str | None = None,
) -> float:
    """A threshold: the candidates come from train, the choice is made on dev: the cheapest that comes within
    `QUALITY_SLACK` of always-strong on dev, else the most accurate (ties to the cheaper)."""
    del train  # the candidates were drawn from it; kept in the signature so that the call says where each comes from
    strong = score(dev, lambda _: STRONG, costs).accuracy
    scored = sweep(dev, make, candidates, costs, evidence)
    good = [(s.cost, t) for t, s in scored if s.accuracy >= strong - QUALITY_SLACK]
    if good:
        return min(good)[1]
    return max(scored, key=lambda ts: (ts[1].accuracy, -ts[1].cost))[0]


def candidates_from(values: Sequence[float | None], extra: Sequence[float] = ()) -> list[float]:
    """Thresholds between the train values seen (each value itself, and just above the largest)."""
    seen = sorted({round(float(v), 4) for v in values if v is not None} | set(extra))
    return [*seen, (seen[-1] + 1e-3) if seen else 1.0]


def _interval(diff: np.ndarray, seed: int) -> tuple[float, float, float]:
    """The mean of per-item differences and its 95% bootstrap interval, items resampled."""
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(BOOTSTRAP, len(diff)))].mean(axis=1)
    return float(diff.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def _correct(
    pairs: Sequence[Pair], policy: Callable[[Pair], Decision], costs: Costs, evidence: str | None
) -> np.ndarray:
    return np.array([outcome(p, policy(p), costs, evidence)[0] for p in pairs], dtype=float)


def bootstrap_gap(
    pairs: Sequence[Pair], policy: Callable[[Pair], Decision], costs: Costs, evidence: str | None, seed: int
) -> tuple[float, float, float]:
    """The accuracy gap to always-strong (strong minus policy) and its 95% bootstrap interval."""
    strong = np.array([p.strong_correct for p in pairs], dtype=float)
    return _interval(strong - _correct(pairs, policy, costs, evidence), seed)


def paired_gain(
    pairs: Sequence[Pair],
    a: Callable[[Pair], Decision],
    b: Callable[[Pair], Decision],
    costs: Costs,
    evidence_a: str | None,
    seed: int,
) -> tuple[float, float, float]:
    """Accuracy of `a` minus that of `b` on the same items, with its 95% bootstrap interval."""
    return _interval(_correct(pairs, a, costs, evidence_a) - _correct(pairs, b, costs, None), seed)


def evidence_auroc(pairs: Sequence[Pair]) -> dict[str, dict[str, float | None]]:
    """Per slice and overall: how well each evidence's score of the weak answer tells its errors from its right
    answers (grounding.eval.metrics.auroc)."""
    slices = sorted({p.slice for p in pairs})
    table: dict[str, dict[str, float | None]] = {}
    for name in [*slices, "overall"]:
        chosen = [p for p in pairs if name in ("overall", p.slice)]
        table[name] = {e: auroc([(p.weak_scores.get(e), p.weak_correct) for p in chosen]) for e in EVIDENCES}
    return table


def figures(s: Scored) -> dict[str, Any]:
    return {
        "items": s.items,
        "accuracy": round(s.accuracy, 4),
        "cost": round(s.cost, 4),
        "strong_share": round(s.strong_share, 4),
        "escalation_rate": round(s.escalation_rate, 4),
        "p50_latency_s": round(s.p50_latency_s, 3),
        "p95_latency_s": round(s.p95_latency_s, 3),
        "strong_only_lost": round(s.strong_only_lost, 4),
    }
