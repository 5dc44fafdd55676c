"""The grounding gate's one path for whole and streamed answers (serving.gate), exit by exit, with a stand-in
service and gate: the policy decides, serving regenerates and refuses, the endpoint only renders."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from grounding.guardrail import Verdict, decide, waits_for_verdict
from serving.engines.base import GenerationParams
from serving.gate import gated_answer, stream_verdict
from serving.policy import CallerIdentity
from serving.prompt_router import CascadeGate
from serving.routing import CASCADE_FIRST
from serving.service import GenerationRequest

IMAGE = frozenset({"text", "image"})


def _completion(n: int, model: str, modalities: frozenset[str] = IMAGE, reason: str = "explicit") -> Any:
    submission = SimpleNamespace(modalities=modalities, route_reason=reason)
    return SimpleNamespace(request_id=f"req-{n}", model=model, submission=submission)


@dataclass
class StubService:
    """Starts completions on the model asked for (`auto` under `cascade`: on `small`, as routing would); the
    strongest pool is `large`. Keeps each request and the caller's identity it was started with."""

    started: list[Any] = field(default_factory=list)
    modalities: frozenset[str] = IMAGE
    requests: list[GenerationRequest] = field(default_factory=list)
    identities: list[CallerIdentity] = field(default_factory=list)
    cascade_gate: CascadeGate | None = None  # the loaded router's fitted gate

    @property
    def pipeline(self) -> Any:
        return SimpleNamespace(cascade_gate=self.cascade_gate)

    async def start(self, request: GenerationRequest, caller: Any) -> Any:
        model, reason = request.model, request.route_reason or "explicit"
        if model == "auto":
            cascading = caller.identity.routing_policy == "cascade" and self.modalities - {"text"}
            model, reason = "small", CASCADE_FIRST if cascading else "simple"
        completion = _completion(len(self.started), model, self.modalities, reason)
        self.started.append(completion)
        self.requests.append(request)
        self.identities.append(caller.identity)
        return completion

    def strongest_model(self, modalities: frozenset[str]) -> str:
        return "large"


@dataclass
class StubGate:
    """Scores each request from a list of scores, in the order asked; policy as grounding.guardrail decides."""

    scores: list[float | None]
    prepared: list[str] = field(default_factory=list)
    checked_with: dict[str, tuple[str, float]] = field(default_factory=dict)  # request: (evidence, threshold)

    def waits(self, caller: CallerIdentity, completion: Any) -> bool:
        if not waits_for_verdict(caller.grounding_policy) or not completion.submission.modalities - {"text"}:
            return False
        self.prepared.append(completion.request_id)
        self.checked_with[completion.request_id] = (caller.grounding_evidence, caller.grounding_threshold)
        return True

    async def verdict(self, request_id: str) -> Verdict | None:
        score = self.scores[int(request_id.split("-")[1])]
        threshold = self.checked_with.get(request_id, ("label_head", 0.9))[1]
        return None if score is None else Verdict(score, threshold, 2, () if score >= threshold else ("a star",))

    def action(self, caller: CallerIdentity, verdict: Any, *, streamed: bool, attempt: int) -> Any:
        return decide(caller.grounding_policy, verdict, streamed=streamed, attempt=attempt)


def _caller(policy: str, routing: str = "heuristic") -> Any:
    identity = CallerIdentity(tenant_id="t", grounding_policy=policy, routing_policy=routing, grounding_threshold=0.9)
    return SimpleNamespace(identity=identity)


def _request(model: str = "small", temperature: float = 0.7) -> GenerationRequest:
    params = GenerationParams(max_tokens=16, temperature=temperature)
    return GenerationRequest(model=model, messages=[], params=params, buffered=True)


async def _render(completion: Any) -> dict[str, Any]:
    return {"answered_by": completion.request_id}


def _answer(policy: str, scores: list[float | None], **request: Any) -> tuple[Any, StubService, StubGate]:
    service, gate = StubService(), StubGate(scores)
    answer = asyncio.run(gated_answer(service, gate, _request(**request), _caller(policy), _render))  # type: ignore[arg-type]
    return answer, service, gate


@pytest.mark.parametrize("policy", ["off", "score"])
def test_policies_that_do_not_wait_render_the_first_answer_with_no_verdict(policy):
    answer, _, gate = _answer(policy, [0.1])
    assert (answer.body, answer.verdict, answer.refused, answer.regenerated) == (
        {"answered_by": "req-0"},
        None,
        False,
        False,
    )
    assert answer.grounding() is None
    assert gate.prepared == []


def test_flag_carries_the_verdict_of_a_failed_answer_and_does_not_regenerate():
    answer, service, gate = _answer("flag", [0.5])
    assert answer.body == {"answered_by": "req-0"}
    assert answer.grounding() == {
        "score": 0.5, "threshold": 0.9, "passed": False, "flagged": True, "claims": 2, "unsupported_claims": ["a star"],
        "checked_claims": [],
    }  # fmt: skip
    assert not answer.refused
    assert len(service.started) == 1
    assert gate.prepared == ["req-0"]


def test_block_passes_a_grounded_answer_as_it_is():
    answer, service, _ = _answer("block", [0.95])
    assert (answer.refused, answer.regenerated, len(service.started)) == (False, False, 1)
    assert answer.grounding()["passed"] is True


def test_block_regenerates_a_failed_answer_on_the_strongest_pool_and_keeps_a_grounded_second():
    answer, service, gate = _answer("block", [0.5, 0.95])
    assert [c.model for c in service.started] == ["small", "large"]
    assert answer.body == {"answered_by": "req-1"}
    assert answer.completion is service.started[1]
    assert (answer.refused, answer.regenerated) == (False, True)
    assert answer.grounding()["regenerated"] is True
    assert gate.prepared == ["req-0", "req-1"]


def test_block_refuses_when_the_second_answer_fails_too():
    answer, service, _ = _answer("block", [0.5, 0.4])
    assert len(service.started) == 2
    assert (answer.refused, answer.regenerated) == (True, True)
    assert answer.grounding()["flagged"] is True


def test_block_refuses_at_once_where_a_second_try_would_repeat_the_first():
    # greedy decoding on the strongest pool already: the same answer again
    answer, service, _ = _answer("block", [0.5], model="large", temperature=0.0)
    assert len(service.started) == 1
    assert (answer.refused, answer.regenerated) == (True, False)


def test_no_verdict_means_no_refusal():
    answer, service, _ = _answer("block", [None])
    assert (answer.refused, answer.verdict, len(service.started)) == (False, None, 1)


def test_a_request_without_media_waits_for_nothing():
    service, gate = StubService(modalities=frozenset({"text"})), StubGate([0.1])
    answer = asyncio.run(gated_answer(service, gate, _request(), _caller("block"), _render))  # type: ignore[arg-type]
    assert (answer.verdict, answer.refused, gate.prepared) == (None, False, [])


def test_without_a_gate_every_answer_goes_out_as_rendered():
    service = StubService()
    answer = asyncio.run(gated_answer(service, None, _request(), _caller("block"), _render))  # type: ignore[arg-type]
    assert (answer.body, answer.verdict) == ({"answered_by": "req-0"}, None)


def test_a_stream_under_block_is_flagged_not_taken_back():
    gate = StubGate([0.5])
    source = stream_verdict(gate, _caller("block"), _completion(0, "small"))  # type: ignore[arg-type]
    assert source is not None
    assert asyncio.run(source())["flagged"] is True
    assert stream_verdict(gate, _caller("score"), _completion(0, "small")) is None  # type: ignore[arg-type]
    assert stream_verdict(None, _caller("flag"), _completion(0, "small")) is None


def _cascade(
    policy: str, scores: list[float | None], modalities: frozenset[str] = IMAGE, fitted: CascadeGate | None = None
) -> tuple[Any, StubService]:
    service, gate = StubService(modalities=modalities, cascade_gate=fitted), StubGate(scores)
    caller = _caller(policy, routing="cascade")
    answer = asyncio.run(gated_answer(service, gate, _request("auto"), caller, _render))  # type: ignore[arg-type]
    return answer, service


@pytest.mark.parametrize("policy", ["off", "score", "flag"])
def test_a_cascade_keeps_the_weak_answer_that_passes(policy):
    answer, service = _cascade(policy, [0.95])
    assert [c.model for c in service.started] == ["small"]
    assert answer.body == {"answered_by": "req-0"}
    assert not answer.refused
    # The first attempt is scored and waited for whatever the guardrail; the verdict rides on the answer only where
    # the caller's own guardrail shows verdicts.
    assert service.identities[0].grounding_policy == "flag"
    assert (answer.grounding() is not None) == (policy == "flag")


@pytest.mark.parametrize("score", [0.5, None], ids=["failed", "no verdict"])
def test_a_cascade_escalates_an_answer_it_cannot_vouch_for_and_links_the_attempts(score):
    answer, service = _cascade("score", [score, 0.2])
    assert [c.model for c in service.started] == ["small", "large"]
    assert answer.body == {"answered_by": "req-1"}
    assert answer.completion is service.started[1]
    escalation = service.requests[1]
    assert escalation.attempt_of == "req-0"
    assert (
        escalation.route_reason
        == f"cascade: escalated from small ({'no verdict' if score is None else 'grounding failed'})"
    )
    assert service.identities[1].grounding_policy == "score"  # the caller's own guardrail on the answer it gets
    assert (answer.refused, answer.grounding()) == (False, None)


def test_a_fitted_gate_checks_the_first_attempt_of_callers_without_a_guardrail_of_their_own():
    fitted = CascadeGate("judge", 0.6)
    kept, service = _cascade("score", [0.7], fitted=fitted)  # 0.7 passes the fitted 0.6, not the caller's 0.9
    assert [c.model for c in service.started] == ["small"]
    assert kept.body == {"answered_by": "req-0"}
    first = service.identities[0]
    assert (first.grounding_policy, first.grounding_evidence, first.grounding_threshold) == ("flag", "judge", 0.6)
    # A caller whose guardrail waits keeps its own bar: its 0.9 escalates the same answer.
    _, service = _cascade("flag", [0.7, 0.95], fitted=fitted)
    assert [c.model for c in service.started] == ["small", "large"]
    assert (service.identities[0].grounding_evidence, service.identities[0].grounding_threshold) == ("label_head", 0.9)


def test_under_block_a_cascade_refuses_a_failing_escalated_answer_rather_than_try_a_third_time():
    answer, service = _cascade("block", [0.5, 0.4])
    assert [c.model for c in service.started] == ["small", "large"]
    assert answer.refused


def test_a_cascade_does_not_check_text_it_has_no_evidence_for():
    answer, service = _cascade("score", [0.1], modalities=frozenset({"text"}))
    assert [c.model for c in service.started] == ["small"]
    assert answer.body == {"answered_by": "req-0"}


def test_a_regenerated_answer_names_the_first_attempt():
    _, service, _ = _answer("block", [0.5, 0.95])
    assert service.requests[1].attempt_of == "req-0"
    assert service.requests[1].route_reason == "regenerated: grounding failed on small"


def test_a_named_model_under_a_cascade_policy_is_answered_under_the_callers_own_guardrail():
    service, gate = StubService(), StubGate([0.1])
    caller = _caller("score", routing="cascade")
    answer = asyncio.run(gated_answer(service, gate, _request("small"), caller, _render))  # type: ignore[arg-type]
    assert [c.model for c in service.started] == ["small"]
    assert service.identities[0].grounding_policy == "score"  # not scored as a cascade's first attempt
    assert (answer.verdict, gate.prepared) == (None, [])
