"""The grounding eval's results: one item's outcome, the metrics over many, sliced, and the gate they must pass.

Accuracy is judged by demo.answers; hallucinated objects are counted CHAIR-style (objects mentioned that the
media do not hold, over all mentioned); POPE-style yes/no accuracy is over the "is there a <colour> <shape>" items;
the guardrail's precision, recall and false flags come from the verdicts the server attached, and, where every
verdict carried its score, at other tenant thresholds too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Applied overall and to every modality-mix slice, so one slice regressing fails the gate; the guardrail's figures
# are gated on the forced answers (grounding.eval.forced), as the tenant's policy served them.
GATE = {
    "accuracy_min": 0.92,
    "hallucination_max": 0.03,
    "guardrail_recall_min": 0.90,
    "guardrail_false_flag_max": 0.05,
}
EVIDENCE = ("label_head", "judge")


class EvalFailure(RuntimeError):
    """The eval could not run every step, or its results are malformed."""


@dataclass
class ItemResult:
    id: str
    model: str
    mix: str
    target: str
    kind: str
    question: str
    reference: str
    answer: str
    correct: bool
    problems: list[str]
    objects: list[str]
    hallucinated: list[str]
    yes_no: str | None
    expected: str | None  # the reference yes/no of an "exists" item
    flagged: bool | None  # the guardrail's verdict, None when the response carried none
    latency_s: float
    error: str | None = None
    unsupported: list[str] | None = None  # the claims the guardrail found unsupported, None when it said nothing
    score: float | None = None  # the guardrail's grounding score, None when it gave none
    evidence_scores: dict[str, float] | None = None  # each evidence's own score (a `both` policy gives both)
    threshold: float | None = None  # the tenant's threshold the verdict applied
    checked: list[dict[str, Any]] | None = None  # each checked claim, its evidence, verdict and P(yes)
    forced: str | None = None  # "right" or "wrong": an answer the eval made the model give (grounding.eval.forced)
    prompt_tokens: int | None = None  # the request's prompt tokens as the server counted them (usage)


def _ratio(numerator: int, denominator: int) -> float | None:
    return round(numerator / denominator, 4) if denominator else None


def metrics(results: Iterable[ItemResult]) -> dict[str, Any]:
    """Accuracy, CHAIR (per mention and per answer), POPE yes/no and guardrail precision/recall of `results`."""
    rs = list(results)
    mentioned = sum(len(r.objects) for r in rs)
    pope = [r for r in rs if r.expected is not None]
    said_yes = [r for r in pope if r.yes_no == "yes"]
    judged = [r for r in rs if r.flagged is not None]
    return {
        "items": len(rs),
        "errors": sum(r.error is not None for r in rs),
        "accuracy": _ratio(sum(r.correct for r in rs), len(rs)),
        "objects_mentioned": mentioned,
        "hallucination_rate": _ratio(sum(len(r.hallucinated) for r in rs), mentioned),
        "hallucinating_answers": _ratio(sum(bool(r.hallucinated) for r in rs), len(rs)),
        "pope": {
            "items": len(pope),
            "accuracy": _ratio(sum(r.yes_no == r.expected for r in pope), len(pope)),
            "yes_precision": _ratio(sum(r.expected == "yes" for r in said_yes), len(said_yes)),
            "yes_recall": _ratio(
                sum(r.yes_no == "yes" for r in pope if r.expected == "yes"), sum(r.expected == "yes" for r in pope)
            ),
            "yes_ratio": _ratio(len(said_yes), len(pope)),
        },
        "guardrail": _guardrail(judged),
    }


THRESHOLDS = (0.5, 0.75, 0.9, 1.0)  # tenant thresholds the guardrail's figures are also given at


def flag_figures(flags: list[tuple[bool, bool]]) -> dict[str, Any]:
    """Precision, recall and false flags of (flagged, correct) pairs."""
    flagged = [correct for flag, correct in flags if flag]
    wrong = [flag for flag, correct in flags if not correct]
    right = [flag for flag, correct in flags if correct]
    return {
        "precision": _ratio(sum(not c for c in flagged), len(flagged)),
        "recall": _ratio(sum(wrong), len(wrong)),
        "false_flag_rate": _ratio(sum(right), len(right)),
    }


def _guardrail(judged: list[ItemResult]) -> dict[str, Any] | None:
    """The guardrail's figures as the server flagged, and as it would have at other thresholds (from the scores,
    when every verdict carried one)."""
    if not judged:
        return None
    out: dict[str, Any] = {"judged": len(judged), **flag_figures([(bool(r.flagged), r.correct) for r in judged])}
    by_evidence = {name: flag_figures(evidence_flags(judged, name)) for name in EVIDENCE}
    if any(r.evidence_scores for r in judged):
        out["by_evidence"] = by_evidence
    if any(r.score is not None or r.evidence_scores for r in judged):
        out["auroc"] = {
            "both": auroc([(r.score, r.correct) for r in judged]),
            **{name: auroc([((r.evidence_scores or {}).get(name), r.correct) for r in judged]) for name in EVIDENCE},
        }
    if all(r.score is not None for r in judged):
        out["by_threshold"] = {
            str(t): flag_figures([(r.score is not None and r.score < t, r.correct) for r in judged]) for t in THRESHOLDS
        }
    return out


def auroc(scored: list[tuple[float | None, bool]]) -> float | None:
    """How well a grounding score tells wrong answers from right ones, whatever the threshold: the chance that a
    wrong answer scores below a right one (ties count half), over the answers that have a score; None without both
    a wrong and a right one. 0.5 is chance, 1.0 every wrong answer below every right one."""
    wrong = [score for score, correct in scored if score is not None and not correct]
    right = [score for score, correct in scored if score is not None and correct]
    if not wrong or not right:
        return None
    below = sum((w < r) + 0.5 * (w == r) for w in wrong for r in right)
    return round(below / (len(wrong) * len(right)), 4)


def evidence_flags(results: list[ItemResult], evidence: str) -> list[tuple[bool, bool]]:
    """(flagged, correct) as a policy naming `evidence` alone would have flagged: an answer it gave no score is
    not flagged (no made-up verdict), one it scored below the tenant's threshold is."""
    flags = []
    for r in results:
        own = (r.evidence_scores or {}).get(evidence)
        flags.append((own is not None and r.threshold is not None and own < r.threshold, r.correct))
    return flags


def summarise(results: list[ItemResult]) -> dict[str, Any]:
    """Metrics overall and sliced by modality mix and by question kind."""
    by_mix = {m: metrics(r for r in results if r.mix == m) for m in sorted({r.mix for r in results})}
    by_kind = {k: metrics(r for r in results if r.kind == k) for k in sorted({r.kind for r in results})}
    return {"overall": metrics(results), "by_mix": by_mix, "by_kind": by_kind}


def gate(summary: dict[str, Any], forced: dict[str, Any] | None = None) -> list[str]:
    """Why the results fall below the gate, overall or on any modality-mix slice (and, given the forced answers'
    figures, the guardrail as served); empty when they pass."""
    failures = []
    slices = {"overall": summary["overall"], **{f"{m} slice": row for m, row in summary.get("by_mix", {}).items()}}
    for name, row in slices.items():
        where = "" if name == "overall" else f" on the {name}"
        if (row["accuracy"] or 0.0) < GATE["accuracy_min"]:
            failures.append(f"accuracy {row['accuracy']} < {GATE['accuracy_min']}{where}")
        if row["hallucination_rate"] is not None and row["hallucination_rate"] > GATE["hallucination_max"]:
            failures.append(f"hallucination rate {row['hallucination_rate']} > {GATE['hallucination_max']}{where}")
    served = (forced or {}).get("overall", {}).get("served")
    if served and (forced or {}).get("usable"):  # no usable forced answer (no verdicts): nothing to gate
        if (served["recall"] or 0.0) < GATE["guardrail_recall_min"]:
            failures.append(f"guardrail recall on wrong answers {served['recall']} < {GATE['guardrail_recall_min']}")
        flags = served["false_flag_rate"]
        if flags is not None and flags > GATE["guardrail_false_flag_max"]:
            failures.append(f"guardrail false flags on right answers {flags} > {GATE['guardrail_false_flag_max']}")
    return failures


def _numbers(value: Any, path: str) -> Iterable[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _numbers(inner, f"{path}.{key}")
    else:
        yield path, value


def check_well_formed(summary: dict[str, Any], expected_items: int) -> None:
    """Fails unless every item was answered and every rate is null or a finite number in [0, 1]."""
    overall = summary["overall"]
    bad = [] if overall["items"] == expected_items else [f"{overall['items']} of {expected_items} items ran"]
    bad += [] if overall["errors"] == 0 else [f"{overall['errors']} requests failed"]
    for path, value in _numbers(summary, "summary"):
        counted = path.endswith((".items", ".errors", ".objects_mentioned", ".judged"))
        if counted and not (isinstance(value, int) and value >= 0):
            bad.append(f"{path}={value!r} is not a count")
        elif not counted and value is not None and not (isinstance(value, float) and math.isfinite(value)):
            bad.append(f"{path}={value!r} is not a rate")
        elif not counted and value is not None and not 0.0 <= value <= 1.0:
            bad.append(f"{path}={value!r} is outside [0, 1]")
    if bad:
        raise EvalFailure("malformed results: " + "; ".join(bad))
