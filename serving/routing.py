"""Model routing: explicit pool names and aliases, or `auto`, which weighs modality, size, text and headroom."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from serving.errors import InvalidRequest, NotFound

AUTO = "auto"
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


@dataclass(frozen=True)
class RoutingPolicy:
    long_prompt_tokens: int = 1024
    long_text_chars: int = 1200
    min_headroom: float = 0.1


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
    wants_strong = req.fused_tokens >= policy.long_prompt_tokens or text_is_complex(req.text, policy)
    ranked = list(reversed(able)) if wants_strong else able
    reason = "complex" if wants_strong else "simple"
    for pool in ranked:
        if pool.headroom() >= policy.min_headroom:
            return pool.name, reason if pool is ranked[0] else f"{reason}, {ranked[0].name} saturated"
    return ranked[0].name, f"{reason}, all saturated"
