"""The grounding guardrail: what a tenant's policy does with an answer's grounding score. Pure policy, no I/O.

Policies (a tenant's `grounding_policy`, with its `grounding_threshold`):
- `off`: answers are not scored at all;
- `score` (the default): answers with media are scored after the response, off the request path, and the score is
  stored (`GET /v1/usage/{id}`, the console);
- `flag`: the answer is scored before the response ends and the verdict rides on it: a `grounding` extension
  object on the completion (and on the last chunk of a stream, after the deltas went out unscored);
- `block`: as `flag`, and a whole (non-streamed) answer that fails is regenerated once on the strongest pool; if
  that fails too, the client gets an OpenAI-shaped refusal (`message.refusal`, `content: null`) carrying the
  verdict. A streamed answer cannot be taken back once sent, so `block` flags streams.

An answer passes when its score reaches the threshold. A request without media has nothing to ground and no
verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

POLICIES = ("off", "score", "flag", "block")
Action = Literal["none", "annotate", "regenerate", "refuse"]
REFUSAL = "I can't give a grounded answer to this: what I would say is not supported by the image or audio provided."


@dataclass(frozen=True)
class Verdict:
    score: float
    threshold: float
    claims: int
    unsupported: tuple[str, ...]
    checked: tuple[dict[str, Any], ...] = ()  # each claim, its evidence (label_head or judge) and its verdict
    # under `both`, the score each evidence gives on its own (label_head, judge), where it gave one
    by_evidence: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        # One figure everywhere: what the response carries, what is stored and what passes are the same number.
        object.__setattr__(self, "score", round(self.score, 4))

    @property
    def passed(self) -> bool:
        return self.score >= self.threshold

    def wire(self, *, regenerated: bool = False) -> dict[str, Any]:
        """The `grounding` extension object of a response."""
        out: dict[str, Any] = {
            "score": self.score,
            "threshold": self.threshold,
            "passed": self.passed,
            "flagged": not self.passed,
            "claims": self.claims,
            "unsupported_claims": list(self.unsupported),
            "checked_claims": list(self.checked),
        }
        if self.by_evidence:
            out["evidence_scores"] = {name: round(score, 4) for name, score in self.by_evidence}
        if regenerated:
            out["regenerated"] = True
        return out


def waits_for_verdict(policy: str) -> bool:
    """Whether the response waits for the score (flag and block) rather than having it stored later."""
    return policy in ("flag", "block")


def scores(policy: str) -> bool:
    return policy != "off"


def decide(policy: str, verdict: Verdict | None, *, streamed: bool, attempt: int) -> Action:
    """What to do with an answer: `attempt` 0 is the first answer, 1 the regenerated one."""
    if not waits_for_verdict(policy) or verdict is None:
        return "none"
    if policy == "flag" or streamed or verdict.passed:
        return "annotate"
    return "regenerate" if attempt == 0 else "refuse"
