"""`tessera eval routing --confirm`'s live half: each answer's pool and route reason read back as the offline
policies' decisions, and the live figures set beside the offline ones, item by item."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai

from demo.golden import GOLDEN_DIR, read_items
from demo.suite import golden_suite
from grounding.eval.routing_live import LiveAnswer, confirm, live_decision, live_figures, served_policy
from grounding.eval.routing_policies import Costs

SUITE = golden_suite()
COSTS = Costs(weak=0.25, judge_call=0.1)


class Raw:
    def __init__(self, completion: Any, route: str) -> None:
        self._completion, self.headers = completion, httpx.Headers({"x-tessera-route": route})

    def parse(self) -> Any:
        return self._completion


class RoutedClient:
    """Answers `auto` as a served cascade would: items in `escalate` come back from the strong pool, escalated."""

    def __init__(self, answers: dict[str, str], escalate: set[str]) -> None:
        self.answers, self.escalate, self.asked = answers, escalate, []
        self.chat = self.completions = self.with_raw_response = self

    def create(self, **body: Any) -> Raw:
        question = body["messages"][0]["content"][-1]["text"]
        self.asked.append(body["model"])
        escalated = question in self.escalate
        model, route = ("small", "cascade: first attempt")
        if escalated:
            model, route = "large", "cascade: escalated from small (grounding failed)"
        completion = openai.types.chat.ChatCompletion.model_validate(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": self.answers.get(question, "A green triangle.")},
                    }
                ],
            }
        )
        return Raw(completion, route)


def test_each_offline_policy_has_its_served_match():
    assert served_policy("cascade (label_head; text by router)") == "cascade"
    assert served_policy("always-weak") == "weakest"
    assert served_policy("router") == "router"
    assert served_policy("oracle") is None


def test_route_reasons_read_back_as_decisions():
    def answer(model: str, route: str) -> LiveAnswer:
        return LiveAnswer("i", "image", model, route, True, 1.0)

    assert live_decision(answer("small", "cascade: first attempt"), "small") == "kept"
    assert live_decision(answer("large", "cascade: escalated from small (no verdict)"), "small") == "escalated"
    assert live_decision(answer("large", "router: p(weak right) 0.10 < 0.50"), "small") == "strong"
    assert live_decision(answer("small", "simple"), "small") == "weak"


def test_the_confirmation_asks_auto_once_per_item_and_compares_with_the_offline_decisions():
    items = [i for i in read_items(GOLDEN_DIR / "smoke.jsonl") if i.mix == "image"][:4]
    right = {i.question: i.answer for i in items}
    escalated = {items[0].question}
    client = RoutedClient(right, escalated)
    offline = {i.id: {"decision": "kept", "gate_cost": 0.0} for i in items}
    offline[items[0].id] = {"decision": "escalated", "gate_cost": 0.2}
    offline[items[1].id] = {"decision": "escalated", "gate_cost": 0.0}  # the served policy kept this one
    found = {
        "models": {"weak": "small", "strong": "large"},
        "chosen": "cascade (label_head; text by heuristic)",
        "chosen_on_test": offline,
        "policies": {"cascade (label_head; text by heuristic)": {"overall": {"accuracy": 0.75, "cost": 0.6}}},
    }
    live = confirm(client, SUITE, items, found, COSTS, max_tokens=8, deadline=time.monotonic() + 60, progress=print)
    assert client.asked == ["auto"] * 4
    assert live["items"] == 4
    assert live["accuracy"] == 1.0
    assert live["accuracy_minus_offline"] == 0.25
    assert live["decided_as_offline"] == 0.75
    assert live["escalation_rate"] == 0.25
    assert live["strong_share"] == 0.25
    assert live["cost"] == round((0.25 + 0.2 + 1.0 + 3 * 0.25) / 4, 4)  # the escalated item pays both and its gate
    assert live["routes"] == {"cascade: first attempt": 3, "cascade: escalated from small (grounding failed)": 1}
    assert live_figures([], offline, {}, COSTS, "small") == {"items": 0}


def test_confirming_needs_a_router_file_and_a_server_of_its_own():
    import argparse

    import pytest

    from demo.suite import routing_suite
    from grounding.eval.cli import add_eval_parser
    from grounding.eval.routing_cli import run_routing

    parser = argparse.ArgumentParser()
    add_eval_parser(parser.add_subparsers(dest="command"))
    for argv in (["--confirm"], ["--confirm", "--router-out", "r.json", "--base-url", "http://127.0.0.1:9/v1"]):
        args = parser.parse_args(["eval", "routing", "--smoke", *argv])
        with pytest.raises(SystemExit, match="--confirm serves the router it writes"):
            run_routing(args, launch=None, suite=routing_suite())  # type: ignore[arg-type]
