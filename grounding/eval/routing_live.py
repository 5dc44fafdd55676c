"""`tessera eval routing --confirm`: the policy chosen on dev, served once, live, on the test split.

The offline figures score every policy on cached answers. Confirming serves the chosen one for real: a server
reads the router file just written (`TESSERA_ROUTER_PATH`), a tenant takes the served policy that matches the
chosen one (`served_policy`), with a guardrail that does not wait (`score`) so that a cascade checks its first
attempts with the fitted gate, and every test item goes to `auto` once. Each answer's pool (`model`) and route
reason (`x-tessera-route`) say what the served policy did with the item; the report sets that beside what the
offline policy did with it, item by item, and the live accuracy, cost, share of strong calls and latency beside
the offline ones.

Cost is counted as the offline model counts it: r for an answer of the weak pool, 1.0 for the strong pool's, both
for an escalated cascade, plus the gate's judge questions as the offline answers of the same item took them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from grounding.eval.harness import EvalSuite, Progress, _result, request_messages
from grounding.eval.parallel import ask_in_order
from grounding.eval.routing_policies import STRONG, WEAK, Costs
from serving.routing import CASCADE_FIRST

# The served routing policy (serving.routing) that does what each offline policy does; any cascade the report
# names is the served `cascade` with the router file's fitted gate.
SERVED_POLICY = {"always-weak": "weakest", "always-strong": "strongest", "heuristic": "heuristic", "router": "router"}


def served_policy(chosen: str) -> str | None:
    """The served policy matching the offline one, or None where none does (the oracle, a static split)."""
    return "cascade" if chosen.startswith("cascade (") else SERVED_POLICY.get(chosen)


@dataclass(frozen=True)
class LiveAnswer:
    id: str
    slice: str
    served_by: str  # the pool whose answer came back (the response's `model`)
    route: str  # x-tessera-route
    correct: bool
    latency_s: float
    error: str | None = None


def live_decision(answer: LiveAnswer, weak: str) -> str:
    """What the served policy did with an item, in the offline policies' words."""
    if answer.route.startswith("cascade: escalated"):
        return "escalated"
    if answer.route.startswith(CASCADE_FIRST):
        return "kept"
    return WEAK if answer.served_by == weak else STRONG


def ask_auto(client: Any, suite: EvalSuite[Any], item: Any, max_tokens: int) -> LiveAnswer:
    """One item to `auto`, with the pool that answered and the route reason."""
    import openai

    started = time.perf_counter()
    try:
        raw = client.chat.completions.with_raw_response.create(
            model="auto", messages=request_messages(item, suite), temperature=0, max_tokens=max_tokens
        )
        completion = raw.parse()
    except openai.OpenAIError as exc:
        failure = f"{type(exc).__name__}: {exc}"[:500]
        return LiveAnswer(item.id, item.mix, "", "", False, time.perf_counter() - started, failure)
    data = completion.model_dump()
    answer = (data["choices"][0]["message"].get("content") or "") if data.get("choices") else ""
    elapsed = time.perf_counter() - started
    judged = _result(suite, item, "auto", answer, elapsed, None, data)
    route = raw.headers.get("x-tessera-route", "")
    return LiveAnswer(item.id, item.mix, str(data.get("model", "")), route, judged.correct, round(elapsed, 3))


def confirm(
    client: Any,
    suite: EvalSuite[Any],
    items: Sequence[Any],
    found: dict[str, Any],
    costs: Costs,
    *,
    max_tokens: int,
    deadline: float,
    progress: Progress,
    concurrency: int = 1,
) -> dict[str, Any]:
    """Every test item to `auto` once under the served policy; live figures beside the offline ones."""
    weak = found["models"]["weak"]
    offline: dict[str, dict[str, Any]] = found["chosen_on_test"]
    items = [i for i in items if i.id in offline]

    def each(number: int, answer: LiveAnswer, done: list[LiveAnswer]) -> None:
        if number % 25 == 0 or number == len(items):
            progress(f"  live [{number}/{len(items)}] {sum(a.correct for a in done)} right")

    answers = ask_in_order(
        items,
        lambda item: ask_auto(client, suite, item, max_tokens),
        expired=lambda: time.monotonic() > deadline,
        concurrency=concurrency,
        each=each,
        stopped=lambda done: progress(f"  live: time budget spent after {done} of {len(items)} items"),
    )
    return live_figures(answers, offline, found["policies"][found["chosen"]]["overall"], costs, weak)


def _cost(decision: str, gate: float, costs: Costs) -> float:
    if decision == WEAK:
        return costs.weak
    if decision == STRONG:
        return 1.0
    return costs.weak + gate + (1.0 if decision == "escalated" else 0.0)


def live_figures(
    answers: Sequence[LiveAnswer],
    offline: dict[str, dict[str, Any]],
    offline_overall: dict[str, Any],
    costs: Costs,
    weak: str,
) -> dict[str, Any]:
    """Live accuracy, cost, strong share, escalations and latency, how often the served policy decided as the
    offline one did, and the offline figures on the same items beside them."""
    if not answers:
        return {"items": 0}
    decisions = [live_decision(a, weak) for a in answers]
    media = [d for a, d in zip(answers, decisions, strict=True) if a.slice != "text" and d in ("kept", "escalated")]
    latencies = sorted(a.latency_s for a in answers)
    agree = [d == offline[a.id]["decision"] for a, d in zip(answers, decisions, strict=True)]
    accuracy = sum(a.correct for a in answers) / len(answers)
    cost = np.mean([_cost(d, offline[a.id]["gate_cost"], costs) for a, d in zip(answers, decisions, strict=True)])
    return {
        "items": len(answers),
        "failed_requests": sum(1 for a in answers if a.error),
        "accuracy": round(accuracy, 4),
        "cost": round(float(cost), 4),
        "strong_share": round(sum(d in (STRONG, "escalated") for d in decisions) / len(answers), 4),
        "escalation_rate": round(sum(d == "escalated" for d in media) / len(media), 4) if media else 0.0,
        "p50_latency_s": round(float(np.percentile(latencies, 50)), 3),
        "p95_latency_s": round(float(np.percentile(latencies, 95)), 3),
        "decided_as_offline": round(sum(agree) / len(agree), 4),
        "offline": {k: offline_overall.get(k) for k in ("accuracy", "cost", "strong_share", "escalation_rate")},
        "accuracy_minus_offline": round(accuracy - float(offline_overall.get("accuracy") or 0.0), 4),
        "routes": _top_routes(answers),
    }


def _top_routes(answers: Sequence[LiveAnswer], top: int = 8) -> dict[str, int]:
    """The most frequent route reasons, with probabilities and saturation left out of the wording."""
    counts: dict[str, int] = {}
    for a in answers:
        reason = a.route.split(", p(")[0].split(" p(")[0] if a.route else "(none)"
        counts[reason] = counts.get(reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1])[:top])
