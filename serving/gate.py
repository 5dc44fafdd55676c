"""The grounding gate: what serving asks of whoever checks answers against their media, and the one path every
endpoint's answers take through it. Serving defines it; grounding implements it (grounding.service).

A caller's guardrail policy (`CallerIdentity.grounding_policy`) decides what a failing answer does. Under `flag`
and `block` the answer waits for its verdict; under `block` a whole answer that fails is regenerated once on the
strongest pool, and a second failure is refused. Endpoints differ only in how they render an answer, so they hand
their renderer in: chat completions, the Responses API, the console's playground and batch lines all get the
caller's policy the same way. Both attempts of a regenerated answer ran on an engine, so both are metered.

The caller's routing policy `cascade` (serving.routing) runs here too: a whole answer that routing sent to the
weakest pool first (`CASCADE_FIRST`) waits for its verdict whatever the guardrail, and stands only when it passes;
otherwise the strongest pool answers instead, and the caller's guardrail judges that answer as its first. The second
attempt's receipt names the first (`attempt_of`), with the reason it escalated.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

from serving.completion import Completion
from serving.policy import CallerIdentity, CallerPolicy, QuotaHold
from serving.prompt_router import CascadeGate
from serving.record import TokenUsage
from serving.routing import AUTO, CASCADE_FIRST
from serving.tracing import step

if TYPE_CHECKING:
    from serving.service import GenerationRequest, InferenceService

Action = Literal["none", "annotate", "regenerate", "refuse"]
Body = TypeVar("Body")
VerdictSource = Callable[[], Awaitable[dict[str, Any] | None]]


class GateVerdict(Protocol):
    """An answer's verdict, as the gate reports it."""

    @property
    def passed(self) -> bool: ...

    def wire(self, *, regenerated: bool = False) -> dict[str, Any]:
        """The `grounding` extension object a response carries."""
        ...


class GroundingGate(Protocol):
    def waits(self, caller: CallerIdentity, completion: Completion) -> bool:
        """Whether this answer waits for its verdict (the caller's policy asks for one and the request carried
        media to check); when it does, the gate starts what it can while the answer is generated."""
        ...

    async def verdict(self, request_id: str) -> GateVerdict | None:
        """The answer's verdict once it is scored; None when there was nothing to check or no verdict came."""
        ...

    def action(self, caller: CallerIdentity, verdict: GateVerdict | None, *, streamed: bool, attempt: int) -> Action:
        """What the caller's policy does with the verdict: `attempt` 0 is the first answer, 1 the regenerated one."""
        ...


@dataclass(frozen=True)
class GatedAnswer(Generic[Body]):
    """A whole answer after the gate: the rendered body, the completion it came from (the regenerated one when
    regenerated), its verdict, and whether the policy withholds it."""

    body: Body
    completion: Completion
    verdict: GateVerdict | None = None
    refused: bool = False
    regenerated: bool = False

    def grounding(self) -> dict[str, Any] | None:
        """The `grounding` extension object for the response, or None when no verdict applies."""
        return self.verdict.wire(regenerated=self.regenerated) if self.verdict is not None else None


async def gated_answer(
    service: InferenceService,
    gate: GroundingGate | None,
    request: GenerationRequest,
    caller: CallerPolicy,
    render: Callable[[Completion], Awaitable[Body]],
) -> GatedAnswer[Body]:
    """Start `request`, render its whole answer with `render` (which consumes the completion), and apply the
    caller's routing cascade and guardrail: wait for the verdict, escalate or regenerate once on the strongest pool,
    refuse."""
    identity = caller.identity
    # Only `auto` whole answers can cascade (serving.routing); a text-only one is placed by the heuristic instead.
    cascading = gate is not None and identity.routing_policy == "cascade" and request.model == AUTO and request.buffered
    checked = _Checked(caller, service.pipeline.cascade_gate)
    completion = await service.start(request, checked if cascading else caller)
    attempt = 0
    if gate is not None and completion.submission.route_reason.startswith(CASCADE_FIRST):
        escalated = await _cascade(service, gate, request, checked, render, completion)
        if isinstance(escalated, GatedAnswer):
            return escalated
        completion, attempt = escalated, 1  # under `block`, a failing escalated answer is refused, not retried
    if gate is None or not gate.waits(identity, completion):
        return GatedAnswer(await render(completion), completion)
    body = await render(completion)
    with step("tessera.guardrail", **{"tessera.policy": identity.grounding_policy}):
        verdict = await gate.verdict(completion.request_id)
    action = gate.action(identity, verdict, streamed=False, attempt=attempt)
    regenerated = False
    if action == "regenerate":
        strongest = service.strongest_model(completion.submission.modalities)
        if completion.model == strongest and request.params.temperature == 0:
            action = "refuse"  # greedy decoding on the same pool would only give the same answer again
        else:
            again = replace(
                request,
                model=strongest,
                attempt_of=completion.request_id,
                route_reason=f"regenerated: grounding failed on {completion.model}",
            )
            completion = await service.start(again, caller)
            gate.waits(identity, completion)
            body = await render(completion)
            verdict = await gate.verdict(completion.request_id)
            action, regenerated = gate.action(identity, verdict, streamed=False, attempt=1), True
    refused = action == "refuse" and verdict is not None
    return GatedAnswer(body, completion, verdict, refused=refused, regenerated=regenerated)


async def _cascade(
    service: InferenceService,
    gate: GroundingGate,
    request: GenerationRequest,
    checked: _Checked,
    render: Callable[[Completion], Awaitable[Body]],
    first: Completion,
) -> GatedAnswer[Body] | Completion:
    """A cascade's first attempt, on the weakest pool: the answer with its verdict when it passes, else the
    strongest pool's completion, started in its place."""
    caller = checked.caller
    gate.waits(checked.identity, first)  # starts the clip's transcript while the answer is generated
    body = await render(first)
    with step("tessera.cascade", **{"tessera.model": first.model}) as span:
        verdict = await gate.verdict(first.request_id)
        span.set_attributes({"tessera.passed": verdict is not None and verdict.passed})
    if verdict is not None and verdict.passed:
        shown = gate.action(caller.identity, verdict, streamed=False, attempt=0) != "none"
        return GatedAnswer(body, first, verdict if shown else None)
    why = "no verdict" if verdict is None else "grounding failed"
    strongest = service.strongest_model(first.submission.modalities)
    escalation = replace(
        request,
        model=strongest,
        attempt_of=first.request_id,
        route_reason=f"cascade: escalated from {first.model} ({why})",
    )
    return await service.start(escalation, caller)


@dataclass(frozen=True)
class _Checked:
    """The caller as a cascade's first attempt sees it: its answer is scored and waited for, whatever the caller's
    guardrail. A caller whose guardrail waits (`flag`, `block`) keeps its own evidence and threshold: its own bar.
    Any other is checked as under `flag`, with the cascade's fitted gate where one is loaded (`fitted`: the
    evidence and threshold `tessera eval routing` chose on dev), else with its own settings."""

    caller: CallerPolicy
    fitted: CascadeGate | None = None

    @property
    def identity(self) -> CallerIdentity:
        identity = self.caller.identity
        if identity.grounding_policy in ("flag", "block"):
            return identity
        checked = replace(identity, grounding_policy="flag")
        if self.fitted is None:
            return checked
        return replace(checked, grounding_evidence=self.fitted.evidence, grounding_threshold=self.fitted.threshold)

    @property
    def cache_salt(self) -> str | None:
        return self.caller.cache_salt

    def check_model(self, model: str) -> None:
        self.caller.check_model(model)

    async def precheck(self) -> None:
        await self.caller.precheck()

    async def reserve(self, model: str, worst: TokenUsage) -> QuotaHold:
        return await self.caller.reserve(model, worst)


def stream_verdict(gate: GroundingGate | None, caller: CallerPolicy, completion: Completion) -> VerdictSource | None:
    """For a streamed answer, where the caller's policy waits for a verdict: what the stream's end awaits (the
    verdict's wire object). A stream cannot be taken back once sent, so `block` only flags it."""
    if gate is None or not gate.waits(caller.identity, completion):
        return None

    async def verdict() -> dict[str, Any] | None:
        with step("tessera.guardrail", **{"tessera.policy": caller.identity.grounding_policy}):
            found = await gate.verdict(completion.request_id)
        return found.wire() if found is not None else None

    return verdict
