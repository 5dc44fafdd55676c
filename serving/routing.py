"""Model routing: explicit pool names and aliases, or `auto`, which the caller's routing policy decides.

`auto` under each policy (a tenant's `routing_policy`; docs/routing.md):
- `heuristic` weighs modality, prompt size, words that ask for reasoning, and headroom: a complex prompt goes to the
  strongest pool that takes its modalities, a simple one to the weakest, and a pool short of headroom is passed over;
- `cascade` sends media requests to the weakest able pool first; serving (serving.gate) checks that whole answer's
  grounding and escalates it to the strongest pool when it is not vouched for. A text-only request has no
  grounding to check, so the heuristic places it before it is answered, as it does a streamed one;
- `router` asks a fitted model (serving.prompt_router, fitted by `tessera eval routing --router-out`) how likely
  the weakest able pool is to answer right, from the request's media, words, size and the heuristic's word, and
  sends it there when that reaches the model's threshold, else to the strongest; with no router loaded it is
  placed by the heuristic, and its reason says so;
- `weakest` and `strongest` always take that end of the able pools (a static split, and the baselines a routing
  eval compares against).
Explicit pool names are always honoured, whatever the policy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from serving.errors import InvalidRequest, NotFound
from serving.prompt_router import PromptRouter, slice_of

AUTO = "auto"
ROUTING_POLICIES = ("heuristic", "cascade", "router", "weakest", "strongest")
DEFAULT_ROUTING_POLICY = "heuristic"
CASCADE_FIRST = "cascade: first attempt"  # the route reason of an answer serving checks before it may stand
_COMPLEX = re.compile(
    r"\b(why|explain|analy[sz]e|compare|reason|prove|derive|step[- ]by[- ]step|code|debug|"
    r"summari[sz]e|plan|evaluate|critique)\b",
    re.IGNORECASE,
)


class UnknownModel(NotFound):
    def __init__(self, message: str) -> None:
        super().__init__(message, code="model_not_found", param="model")


class ModalityUnsupported(InvalidRequest):
    def __init__(self, message: str) -> None:
        super().__init__(message, code="unsupported_modality", param="model")


@dataclass(frozen=True)
class PoolView:
    """What routing needs to know of a pool."""

    name: str
    aliases: Sequence[str]
    modalities: Sequence[str]
    strength: int  # higher is the stronger (and slower) model
    headroom: Callable[[], float]  # free fraction of the admission budget, 0..1


@dataclass(frozen=True)
class RouteRequest:
    model: str
    modalities: set[str]
    fused_tokens: int
    text: str
    policy: str = DEFAULT_ROUTING_POLICY  # the caller's routing policy (ROUTING_POLICIES)
    streamed: bool = False  # a stream is never cascaded: its first token cannot wait for a verdict


@dataclass(frozen=True)
class RoutingPolicy:
    long_prompt_tokens: int = 1024
    long_text_chars: int = 1200
    min_headroom: float = 0.1
    router: PromptRouter | None = None  # the `router` policy's fitted model, where one is loaded


def text_is_complex(text: str, policy: RoutingPolicy) -> bool:
    return len(text) >= policy.long_text_chars or len(_COMPLEX.findall(text)) >= 1


def route(req: RouteRequest, pools: Sequence[PoolView], policy: RoutingPolicy | None = None) -> tuple[str, str]:
    """Returns (pool name, reason)."""
    policy = policy or RoutingPolicy()
    if req.model != AUTO:
        for pool in pools:
            if req.model == pool.name or req.model in pool.aliases:
                missing = req.modalities - set(pool.modalities)
                if missing:
                    raise ModalityUnsupported(
                        f"the model '{pool.name}' does not accept {', '.join(sorted(missing))} input; it accepts "
                        f"{', '.join(pool.modalities)}"
                    )
                return pool.name, "explicit"
        names = ", ".join([p.name for p in pools] + [AUTO])
        raise UnknownModel(f"the model '{req.model}' does not exist; available: {names}")
    able = [p for p in pools if req.modalities <= set(p.modalities)]
    if not able:
        raise ModalityUnsupported(f"no model accepts {', '.join(sorted(req.modalities))} input together")
    able.sort(key=lambda p: p.strength)
    if req.policy in ("weakest", "strongest"):
        ranked = able if req.policy == "weakest" else list(reversed(able))
        return _with_headroom(ranked, f"policy {req.policy}", policy)
    if req.policy == "cascade" and req.modalities - {"text"} and not req.streamed and len(able) > 1:
        return _with_headroom(able, CASCADE_FIRST, policy)
    wants_strong = req.fused_tokens >= policy.long_prompt_tokens or text_is_complex(req.text, policy)
    fitted = policy.router
    if fitted is not None and len(able) > 1:
        if req.policy == "router":
            return _by_router(fitted, req, able, wants_strong, "router:", policy)
        if req.policy == "cascade" and fitted.cascade is not None and fitted.cascade.text == "router":
            how = "stream" if req.streamed else "text"
            return _by_router(fitted, req, able, wants_strong, f"cascade: {how} placed by the router,", policy)
    ranked = list(reversed(able)) if wants_strong else able
    reason = "complex" if wants_strong else "simple"
    if req.policy == "router" and fitted is None:  # with one able pool a loaded router has nothing to choose
        reason = f"router: none loaded, {reason} by the heuristic"
    if req.policy == "cascade":
        reason = f"cascade: {reason} {'stream' if req.streamed else 'text'}, placed by the heuristic"
    return _with_headroom(ranked, reason, policy)


def _by_router(
    fitted: PromptRouter,
    req: RouteRequest,
    able: list[PoolView],
    wants_strong: bool,
    lead: str,
    policy: RoutingPolicy,
) -> tuple[str, str]:
    """The weakest able pool when the router's P(it answers right) reaches its threshold, else the strongest."""
    p = fitted.p_weak_right(slice_of(req.modalities), req.text, req.fused_tokens, wants_strong)
    weak = p >= fitted.threshold
    reason = f"{lead} p(weak right) {p:.2f} {'>=' if weak else '<'} {fitted.threshold:.2f}"
    return _with_headroom(able if weak else list(reversed(able)), reason, policy)


def _with_headroom(ranked: Sequence[PoolView], reason: str, policy: RoutingPolicy) -> tuple[str, str]:
    """The first of `ranked` with headroom, else the first; the reason says when it passed one over."""
    for pool in ranked:
        if pool.headroom() >= policy.min_headroom:
            return pool.name, reason if pool is ranked[0] else f"{reason}, {ranked[0].name} saturated"
    return ranked[0].name, f"{reason}, all saturated"
