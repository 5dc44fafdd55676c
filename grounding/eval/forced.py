"""The guardrail measured on answers the eval chooses: each item's right answer and a wrong one made by changing one
fact (the suite's `wrong_answer`), which the model is made to give through vLLM's `structured_outputs` choice, so
the answer goes through the whole served path (encoders, engine, judge, label head) as any answer does.

Recall is the share of wrong answers flagged and false flags the share of right answers flagged: as the tenant's
policy served them, and as each evidence alone (label head, judge) would have flagged them, overall and per
modality-mix slice. The judge's own thresholds (yes/no and open questions) are chosen here too (`calibrate_judge`), on
a calibration split only: never on a held-out set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from grounding.eval.metrics import EVIDENCE, ItemResult, evidence_flags, flag_figures
from grounding.eval.parallel import ask_in_order
from grounding.models import JudgeThresholds

JUDGE_THRESHOLDS = tuple(round(0.05 * k, 2) for k in range(1, 20))  # the judge's thresholds tried, for each form


def forced_items(items: Sequence[Any], count: int) -> list[Any]:
    """`count` items (at most all) spread evenly over the set, so every slice keeps its share."""
    if count <= 0 or not items:
        return []
    count = min(count, len(items))
    return [items[i * len(items) // count] for i in range(count)]


def run_forced(
    ask: Callable[[Any, tuple[str, str]], ItemResult],
    items: Sequence[Any],
    wrong_answer: Callable[[Any], str],
    *,
    progress: Callable[[str], None],
    concurrency: int = 1,
    expired: Callable[[], bool] = lambda: False,
) -> list[ItemResult]:
    """Each item asked twice, made to answer its reference answer ("right") and `wrong_answer(item)` ("wrong");
    `ask(item, (label, answer))` sends one. Stops early once `expired()`."""
    jobs = [(item, ("right", item.answer)) for item in items] + [
        (item, ("wrong", wrong_answer(item))) for item in items
    ]

    def each(number: int, result: ItemResult, done: list[ItemResult]) -> None:
        if number % 20 == 0 or number == len(jobs):
            flagged = sum(bool(r.flagged) for r in done if r.forced == "wrong")
            progress(f"  forced answers [{number}/{len(jobs)}], wrong ones flagged so far: {flagged}")

    return ask_in_order(
        jobs,
        lambda job: ask(*job),
        expired=expired,
        concurrency=concurrency,
        each=each,
        stopped=lambda done: progress(f"  forced answers: time budget spent after {done} of {len(jobs)}"),
    )


def usable_forced(results: Sequence[ItemResult]) -> list[ItemResult]:
    """The forced answers that came back as forced: a right answer the suite's judge accepts, a wrong one it
    rejects (a failed request, or a wrong answer that happens to hold, measures nothing)."""
    return [
        r
        for r in results
        if r.error is None and r.forced is not None and r.correct == (r.forced == "right") and r.flagged is not None
    ]


def _figures(results: list[ItemResult]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "right": sum(r.forced == "right" for r in results),
        "wrong": sum(r.forced == "wrong" for r in results),
        "served": flag_figures([(bool(r.flagged), r.correct) for r in results]),
    }
    for name in EVIDENCE:
        if any(name in (r.evidence_scores or {}) for r in results):
            out[name] = flag_figures(evidence_flags(results, name))
    return out


def forced_figures(results: Sequence[ItemResult]) -> dict[str, Any]:
    """Recall on the wrong answers and false flags on the right ones, as served and per evidence; overall and per
    modality-mix slice; with how many forced answers were sent and how many came back usable."""
    usable = usable_forced(results)
    by_mix = {m: _figures([r for r in usable if r.mix == m]) for m in sorted({r.mix for r in usable})}
    return {"sent": len(results), "usable": len(usable), "overall": _figures(usable), "by_mix": by_mix}


def _judge_score(result: ItemResult, thresholds: JudgeThresholds) -> float | None:
    """The answer's judge-only score had the judge held each claim supported at its form's threshold (a yes/no
    question's P(yes), or P(no) for a claim that a thing is absent; an open question's probability of the claimed
    value)."""
    judged = [
        (c.get("support", c["p_yes"]), c.get("form", "yes_no"))
        for c in result.checked or ()
        if c.get("evidence") == "judge" and c.get("p_yes") is not None
    ]
    if not judged:
        return None
    return sum(v >= thresholds.of(form) for v, form in judged) / len(judged)


def calibrate_judge(results: Sequence[ItemResult], false_flag_max: float = 0.05) -> dict[str, Any] | None:
    """The judge's thresholds, yes/no and open (every pair of JUDGE_THRESHOLDS), that flag the most wrong answers
    while flagging at most `false_flag_max` of the right ones (the fewest false flags when no pair does), from
    answers whose verdicts carried the judge's support; None without any. Ties go to the fewer false flags, then
    to the middle of the tied pairs (`_middle`): where a range of thresholds does equally well on the split, its
    middle is the choice least likely to have been fitted to the split's own answers."""
    scored = [r for r in results if r.threshold is not None and _judge_score(r, JudgeThresholds(0.5, 0.5)) is not None]
    if not scored:
        return None
    rows = []
    for t in JUDGE_THRESHOLDS:
        for t_open in JUDGE_THRESHOLDS:
            flags = []
            for r in scored:
                score = _judge_score(r, JudgeThresholds(t, t_open))
                assert score is not None
                assert r.threshold is not None
                flags.append((score < r.threshold, r.correct))
            rows.append({"threshold": t, "open_threshold": t_open, **flag_figures(flags)})
    within = [r for r in rows if r["false_flag_rate"] is not None and r["false_flag_rate"] <= false_flag_max]
    if within:
        top = max((r["recall"] or 0.0, -r["false_flag_rate"]) for r in within)
        tied = [r for r in within if (r["recall"] or 0.0, -r["false_flag_rate"]) == top]
    else:
        top = min(((r["false_flag_rate"] or 0.0), -(r["recall"] or 0.0)) for r in rows)
        tied = [r for r in rows if ((r["false_flag_rate"] or 0.0), -(r["recall"] or 0.0)) == top]
    best = _middle(tied)
    one = [r for r in rows if r["threshold"] == r["open_threshold"]]  # one threshold for both forms, for comparison
    return {"answers": len(scored), "false_flag_max": false_flag_max, "chosen": best, "swept": rows, "one": one}


def _middle(tied: list[dict[str, Any]]) -> dict[str, Any]:
    """The middle of equally good (threshold, open threshold) pairs: the median yes/no threshold among them (the
    lower of two middles), then the median open threshold among the pairs with that one."""
    yes_no = sorted({r["threshold"] for r in tied})
    chosen = yes_no[(len(yes_no) - 1) // 2]
    rows = sorted((r for r in tied if r["threshold"] == chosen), key=lambda r: r["open_threshold"])
    return rows[(len(rows) - 1) // 2]
