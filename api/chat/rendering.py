"""A `Completion` as OpenAI's chat completion: usage, logprobs, tool calls, headers, and the one-body answer.

Rendering iterates the completion only inside `async with`, so however the response ends the lease releases
what it holds. `api.chat.streaming` renders the same completion as SSE chunks.
"""

from __future__ import annotations

from typing import Any

from litestar import Response

from api.chat.protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    Choice,
    ChoiceLogprobs,
    FunctionCallOut,
    PromptTokensDetails,
    ResponseMessage,
    TokenLogprob,
    ToolCallOut,
    TopLogprob,
    Usage,
)
from serving.completion import Completion
from serving.engines import base as engine
from serving.record import TokenUsage
from serving.tools import OutputDecoder


def modality_counts(usage: TokenUsage) -> dict[str, int]:
    """Prompt tokens by modality, and those served from the prefix and embedding caches, as the wire names
    them in both APIs' token details."""
    return {
        "cached_tokens": usage.cached,
        "text_tokens": usage.text,
        "image_tokens": usage.image,
        "audio_tokens": usage.audio,
        "cached_image_tokens": usage.cached_image,
        "cached_audio_tokens": usage.cached_audio,
    }


def wire_usage(usage: TokenUsage) -> Usage:
    details = PromptTokensDetails(**modality_counts(usage))
    return Usage(
        prompt_tokens=usage.prompt,
        completion_tokens=usage.completion,
        total_tokens=usage.total,
        prompt_tokens_details=details,
    )


def finish_reason(reason: str | None, decoder: OutputDecoder | None = None) -> str | None:
    """vLLM's reasons in OpenAI's vocabulary: aborted or repetition-stopped choices stopped, and a choice that
    called tools on its own (`auto`, `required`) finished with `tool_calls`; a named function stops."""
    if reason is None:
        return None
    mapped = "stop" if reason in ("abort", "repetition") else reason
    if decoder is not None and decoder.calls and decoder.mode != "named" and mapped == "stop":
        return "tool_calls"
    return mapped


def wire_logprobs(entries: tuple[engine.TokenLogprob, ...] | list[engine.TokenLogprob] | None) -> ChoiceLogprobs | None:
    if entries is None:
        return None

    def utf8(token: str) -> list[int]:
        return list(token.encode("utf-8", errors="replace"))

    return ChoiceLogprobs(
        content=[
            TokenLogprob(
                token=e.token,
                logprob=e.logprob,
                bytes=utf8(e.token),
                top_logprobs=[TopLogprob(token=t, logprob=lp, bytes=utf8(t)) for t, lp in e.top],
            )
            for e in entries
        ]
    )


def response_headers(completion: Completion) -> dict[str, str]:
    """Where the time went before the response started, which pool answered and why, and the caller's limits."""
    s = completion.submission
    headers = {
        "x-tessera-model": s.pool.name,
        "x-tessera-route": s.route_reason,
        "x-tessera-pre-engine-ms": str(int((s.submitted - s.started) * 1000)),
    }
    if completion.first_token_at is not None:
        headers["x-tessera-engine-ttft-ms"] = str(int((completion.first_token_at - s.submitted) * 1000))
    return {**headers, **s.limits}


def extras(req: ChatCompletionRequest, completion: Completion) -> dict[str, Any]:
    """Tessera's extension fields: prompt token ids when asked for, and what a degraded answer left out."""
    out: dict[str, Any] = {}
    if req.return_token_ids:
        out["prompt_token_ids"] = completion.prompt_token_ids
    if completion.submission.degraded:
        out["degraded"] = {
            "dropped_modalities": list(completion.submission.degraded),
            "reason": "the encoder pool was unavailable; answered without that media",
        }
    return out


async def complete(req: ChatCompletionRequest, completion: Completion) -> Response[dict[str, Any]]:
    return Response(await complete_body(req, completion), headers=response_headers(completion))


async def complete_body(req: ChatCompletionRequest, completion: Completion) -> dict[str, Any]:
    """The whole answer as an OpenAI chat completion body, once its usage is on record."""
    decoders = [completion.decoder() for _ in completion.choices]
    async with completion:
        async for delta in completion:
            decoders[delta.index].feed(delta)
    await completion.require_recorded()  # the response goes out once its usage is on record, else a 503
    choices = []
    for choice, decoder in zip(completion.choices, decoders, strict=True):
        decoder.finish()
        calls = [
            ToolCallOut(id=c.id, function=FunctionCallOut(name=c.name, arguments=c.arguments)) for c in decoder.calls
        ]
        choices.append(
            Choice(
                index=choice.index,
                message=ResponseMessage(content=decoder.content(), tool_calls=calls or None),
                logprobs=wire_logprobs(choice.logprobs) if req.logprobs else None,
                finish_reason=finish_reason(choice.finish_reason, decoder) or "stop",
                token_ids=list(choice.token_ids) if req.return_token_ids else None,
            )
        )
    body = ChatCompletion(
        id=completion.request_id,
        created=completion.submission.created,
        model=completion.model,
        choices=choices,
        usage=wire_usage(completion.usage()),
        **extras(req, completion),
    )
    return body.model_dump(mode="json")
