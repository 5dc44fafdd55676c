"""Which OpenAI chat-completion request fields Tessera honours, accepts without effect, or refuses.

Nothing is silently ignored: a field that would change the answer and that Tessera cannot honour is refused
with a 400 naming it. README.md's field table says the same, row by row.
"""

from __future__ import annotations

from typing import Any

from api.chat.protocol import ChatCompletionRequest
from serving.errors import InvalidRequest

# Fields OpenAI defines that Tessera does not implement: any value other than these is refused.
REFUSED: dict[str, tuple[tuple[Any, ...], str]] = {
    "audio": ((None,), "audio output is not supported; answers are text"),
    "function_call": ((None,), "`function_call` is deprecated; use `tool_choice`"),
    "functions": ((None,), "`functions` is deprecated; use `tools`"),
    "prediction": ((None,), "predicted outputs are not supported"),
    "reasoning_effort": ((None,), "the models served here do not reason in separate tokens"),
    "verbosity": ((None,), "verbosity is not supported"),
    "web_search_options": ((None,), "web search is not available"),
    "moderation": ((None,), "moderation is not available"),
    "prompt_cache_retention": ((None,), "prompt cache retention cannot be chosen; the prefix cache is per tenant"),
    "prompt_cache_options": ((None,), "prompt cache options cannot be chosen; the prefix cache is per tenant"),
}


def check_fields(req: ChatCompletionRequest) -> None:
    """Refuse what cannot be honoured, naming the field."""
    extra = req.model_extra or {}
    for name, (allowed, reason) in REFUSED.items():
        if name in extra and extra[name] not in allowed:
            raise InvalidRequest(reason, param=name, code="unsupported_parameter")
    if req.store:
        raise InvalidRequest(
            "completions are not stored; send store: false or leave it out", param="store", code="unsupported_parameter"
        )
    if req.modalities is not None and set(req.modalities) - {"text"}:
        raise InvalidRequest("only text output is supported", param="modalities", code="unsupported_parameter")
    if req.service_tier not in (None, "auto", "default"):
        raise InvalidRequest(
            "one service tier is offered; send `auto` or `default`, or use `priority: batch` for background work",
            param="service_tier",
            code="unsupported_parameter",
        )


def logit_bias(req: ChatCompletionRequest) -> dict[int, float] | None:
    """OpenAI's token-id strings as integers, each bias within [-100, 100]."""
    if not req.logit_bias:
        return None
    out: dict[int, float] = {}
    for key, value in req.logit_bias.items():
        if not key.isdigit():
            raise InvalidRequest(f"logit_bias keys are token ids; got {key!r}", param="logit_bias")
        if not -100 <= value <= 100:
            raise InvalidRequest("logit_bias values must be between -100 and 100", param=f"logit_bias.{key}")
        out[int(key)] = float(value)
    return out
