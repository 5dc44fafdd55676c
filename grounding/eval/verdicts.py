"""What the grounding eval reads from a response: the guardrail's verdict, as the server attached it (a `grounding`
object with `flagged` or `passed`, on the completion or its choice, or a `refusal` on the message). Nothing is
guessed: a response without a verdict reads as None."""

from __future__ import annotations

from typing import Any


def _grounding_object(completion: dict[str, Any]) -> dict[str, Any] | None:
    choices = completion.get("choices") or [{}]
    for holder in (choices[0], completion):
        verdict = holder.get("grounding")
        if isinstance(verdict, dict):
            return verdict
    return None


def guardrail_flag(completion: dict[str, Any]) -> bool | None:
    """True when the server's grounding guardrail failed the answer, False when it passed it, None if silent."""
    verdict = _grounding_object(completion) or {}
    if isinstance(verdict.get("flagged"), bool):
        return bool(verdict["flagged"])
    if isinstance(verdict.get("passed"), bool):
        return not verdict["passed"]
    choices = completion.get("choices") or [{}]
    return True if (choices[0].get("message") or {}).get("refusal") else None


def guardrail_details(completion: dict[str, Any]) -> tuple[list[str] | None, float | None]:
    """The claims the server's guardrail found unsupported and the answer's score, each None when not given."""
    verdict = _grounding_object(completion) or {}
    claims, score = verdict.get("unsupported_claims"), verdict.get("score")
    return (
        [str(c) for c in claims] if isinstance(claims, list) else None,
        float(score) if isinstance(score, int | float) else None,
    )


def verdict_evidence(
    completion: dict[str, Any],
) -> tuple[dict[str, float] | None, float | None, list[dict[str, Any]] | None]:
    """Each evidence's own score (`evidence_scores`), the tenant's threshold and the checked claims, each None when
    the verdict did not give it."""
    verdict = _grounding_object(completion) or {}
    scores, threshold, checked = verdict.get("evidence_scores"), verdict.get("threshold"), verdict.get("checked_claims")
    return (
        {str(k): float(v) for k, v in scores.items()} if isinstance(scores, dict) else None,
        float(threshold) if isinstance(threshold, int | float) else None,
        [c for c in checked if isinstance(c, dict)] if isinstance(checked, list) else None,
    )
