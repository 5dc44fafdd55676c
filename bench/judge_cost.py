"""What one grounding-judge question costs the strong pool, for `tessera bench cost` (`judge_call` in its report).

The routing policies price a judge-gated cascade as the weak pool's answer, plus one engine call on the strong
pool per judge question (`grounding.judge`), plus the strong pool's answer when the gate escalates. This phase
measures that question's price on the same bare `large` replica the cost bench has just measured, in the same unit
(engine seconds per request, from vLLM's `vllm:request_inference_time_seconds`), so `judge_call` is the ratio of
one question's engine seconds to one of the mixed workload's `large` requests.

A question is asked as the judge asks it: the answered request's conversation with its last user turn's text
replaced by the question, `max_tokens` 1 for a yes/no question and `ANSWER_TOKENS` for an open one, greedy, with
top logprobs. Two cases are timed, since they cost differently:

- **cold**: the judge pool did not answer the request (a cascade's gate on `small`'s answer asks `large`), so the
  first question of an answer prefills the whole prompt, image included; the others share its prefix.
- **warm**: the judge pool answered the request itself (the guardrail on a `large` answer), so every question
  shares the answer's prefix (system prompt and image) in the engine's prefix cache.

Each answer gets the same questions, one after another (closed loop, so none overlap).
"""

from __future__ import annotations

import statistics
from typing import Any

import httpx

from bench.common import BenchFailure, Progress, metric
from bench.fleet_workload import FleetSizes, Job, request_body
from bench.replicas import Replica
from grounding.open_questions import ANSWER_TOKENS

# A typical answer's questions: what the judge asks of a described shape (yes/no), then of its count and colour
# (open). The judge asks about three of a media answer on average (2.8-3.0 on `large`'s held-out answers).
QUESTIONS: tuple[tuple[str, bool], ...] = (
    ("Is there a red circle in the image? Answer yes or no.", False),
    ("How many shapes are there in the image?", True),
    ("What colour is the circle in the image?", True),
)
TOP_LOGPROBS = 10
IMAGE_SEED_BASE = 70_000  # images none of the cost bench's workloads draw


def _question_body(answered: dict[str, Any], question: str, open_form: bool) -> dict[str, Any]:
    system, user = answered["messages"]
    media = [part for part in user["content"] if part["type"] != "text"]
    return {
        "model": answered["model"],
        "messages": [system, {"role": "user", "content": [*media, {"type": "text", "text": question}]}],
        "max_tokens": ANSWER_TOKENS if open_form else 1,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": TOP_LOGPROBS,
    }


def _post(http: httpx.Client, body: dict[str, Any]) -> None:
    got = http.post("/v1/chat/completions", json=body)
    if got.status_code != 200:
        raise BenchFailure(f"the judge phase's request answered {got.status_code}: {got.text[:300]}")


def _engine_seconds(replica: Replica) -> tuple[float, float]:
    return (
        metric(replica.url, "vllm:request_inference_time_seconds_sum"),
        metric(replica.url, "vllm:request_inference_time_seconds_count"),
    )


def measure_judge_questions(
    replica: Replica, sizes: FleetSizes, answers: int, progress: Progress
) -> dict[str, dict[str, float | int]]:
    """Engine seconds per judge question on `replica`, cold and warm, over `answers` image answers each."""
    figures: dict[str, dict[str, float | int]] = {}
    with httpx.Client(base_url=replica.url, timeout=300) as http:
        # untimed: the first logprob-bearing and one-token requests of the replica take paths nothing else warmed
        warm_up = request_body(Job(-1, 0.0, "image", 0, 0, image=IMAGE_SEED_BASE - 1), sizes)
        for question, open_form in QUESTIONS:
            _post(http, _question_body(warm_up, question, open_form))
        for case, answer_first in (("cold", False), ("warm", True)):
            per_answer: list[float] = []
            asked = 0
            for n in range(answers):
                seed = IMAGE_SEED_BASE + (1000 if answer_first else 0) + n
                answered = request_body(Job(n, 0.0, "image", 0, 0, image=seed), sizes)
                if answer_first:
                    _post(http, answered)
                before = _engine_seconds(replica)
                for question, open_form in QUESTIONS:
                    _post(http, _question_body(answered, question, open_form))
                after = _engine_seconds(replica)
                counted = after[1] - before[1]
                if counted != len(QUESTIONS):
                    raise BenchFailure(f"the replica counted {counted:g} of {len(QUESTIONS)} judge questions")
                per_answer.append((after[0] - before[0]) / counted)
                asked += len(QUESTIONS)
            figures[case] = {
                "questions": asked,
                "engine_s_per_question": round(statistics.median(per_answer), 4),
                "min": round(min(per_answer), 4),
                "max": round(max(per_answer), 4),
            }
            progress(
                f"    judge questions, {case}: {figures[case]['engine_s_per_question']:.3f} engine s each "
                f"(median of {answers} answers of {len(QUESTIONS)} questions)"
            )
    return figures


def judge_call_ratio(judge: dict[str, dict[str, float | int]], large_engine_s: float) -> dict[str, float]:
    """Each case's question cost over one `large` request of the mixed workload: the routing eval's `--judge-call`
    (the cascade's gate asks cold: the answer it checks is `small`'s)."""
    if large_engine_s <= 0:
        raise BenchFailure("no engine seconds for large's requests to price the judge's questions against")
    return {case: round(float(f["engine_s_per_question"]) / large_engine_s, 4) for case, f in judge.items()}
