"""The cost bench's judge phase: questions asked as the judge asks them, priced against a `large` request."""

from __future__ import annotations

import pytest

from bench.common import BenchFailure
from bench.fleet_workload import FleetSizes, Job, request_body
from bench.judge_cost import QUESTIONS, _question_body, judge_call_ratio
from grounding.open_questions import ANSWER_TOKENS


def _answered() -> dict:
    sizes = FleetSizes(requests=1, rate=1.0, max_tokens=16, tenants=1, prompts_per_tenant=1, prompt_words=10)
    return request_body(Job(0, 0.0, "image", 0, 0, image=70_000), sizes)


def test_a_question_keeps_the_answers_system_prompt_and_image_and_replaces_its_text():
    answered = _answered()
    yes_no = _question_body(answered, QUESTIONS[0][0], open_form=False)
    system, user = yes_no["messages"]
    assert system == answered["messages"][0]  # the prefix the engine may have cached
    assert [p["type"] for p in user["content"]] == ["image_url", "text"]
    assert user["content"][0] == answered["messages"][1]["content"][0]
    assert user["content"][1]["text"] == QUESTIONS[0][0]
    assert (yes_no["max_tokens"], yes_no["logprobs"], yes_no["temperature"]) == (1, True, 0)
    assert "ignore_eos" not in yes_no  # the judge's answer stops where the model stops it
    assert _question_body(answered, QUESTIONS[1][0], open_form=True)["max_tokens"] == ANSWER_TOKENS


def test_judge_call_is_a_question_over_a_large_request():
    judge = {"cold": {"engine_s_per_question": 0.5}, "warm": {"engine_s_per_question": 0.1}}
    assert judge_call_ratio(judge, 2.0) == {"cold": 0.25, "warm": 0.05}
    with pytest.raises(BenchFailure, match="no engine seconds"):
        judge_call_ratio(judge, 0.0)
