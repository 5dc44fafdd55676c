"""A chat completion request: its body into the wire struct, and the struct into the `GenerationRequest` that
serving takes, naming the offending `param` on every error."""

from __future__ import annotations

import logging
import re

from pydantic import ValidationError

from api.chat.fields import check_fields, logit_bias
from api.chat.protocol import ChatCompletionRequest, ResponseFormat, StructuredOutputs
from api.parsing import param_path, read_json_object, unknown_fields
from serving.engines.base import GenerationParams, StructuredOutput
from serving.errors import InvalidRequest
from serving.service import GenerationRequest
from serving.tools import AUTO, ToolPlan, ToolSpec

logger = logging.getLogger(__name__)


def parse_chat_request(body: bytes) -> ChatCompletionRequest:
    data = read_json_object(body)
    try:
        req = ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = param_path(tuple(first["loc"])) or None
        missing = first["type"] == "missing"
        message = f"missing required field '{param}'" if missing else f"invalid value for '{param}': {first['msg']}"
        raise InvalidRequest(message, param=param, code="missing_field" if missing else "invalid_value") from exc
    unknown = unknown_fields(req)
    if unknown:
        logger.info("accepted unknown request fields: %s", ", ".join(sorted(unknown)))
    return req


def generation_request(req: ChatCompletionRequest, default_max_tokens: int) -> GenerationRequest:
    check_fields(req)
    _check_choices(req)
    max_tokens = req.completion_limit() or default_max_tokens
    _check_lengths(req, max_tokens)
    params = GenerationParams(
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        seed=req.seed,
        stop=tuple(req.stop_list()),
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        repetition_penalty=req.repetition_penalty,
        min_tokens=req.min_tokens,
        ignore_eos=req.ignore_eos,
        n=req.n,
        logprobs=_logprobs(req),
        structured=_constraint(req),
        logit_bias=logit_bias(req),
    )
    return GenerationRequest(
        req.model, req.messages, params, req.priority, req.allow_degraded, _tool_plan(req), buffered=not req.stream
    )


def _check_choices(req: ChatCompletionRequest) -> None:
    if req.n > 1 and req.temperature == 0:
        raise InvalidRequest(
            "n > 1 needs sampling: with temperature 0 every choice would be the same", param="n", code="invalid_value"
        )


def _check_lengths(req: ChatCompletionRequest, max_tokens: int) -> None:
    """What the engine would refuse with a message but no field name."""
    if req.min_tokens > max_tokens:
        raise InvalidRequest(
            f"min_tokens ({req.min_tokens}) is more than the completion may have ({max_tokens})", param="min_tokens"
        )
    if "" in req.stop_list():
        raise InvalidRequest("a stop sequence cannot be empty", param="stop")


def _logprobs(req: ChatCompletionRequest) -> int | None:
    if req.top_logprobs is not None and not req.logprobs:
        raise InvalidRequest("top_logprobs needs logprobs: true", param="top_logprobs", code="invalid_value")
    return (req.top_logprobs or 0) if req.logprobs else None


def _structured(fmt: ResponseFormat | None) -> StructuredOutput | None:
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return StructuredOutput(json_object=True)
    if fmt.json_schema is None:
        raise InvalidRequest(
            "response_format of type json_schema needs `json_schema`", param="response_format.json_schema"
        )
    schema = fmt.json_schema.schema_
    if schema is not None and not isinstance(schema.get("type", "object"), str | list):
        raise InvalidRequest("the JSON schema is not valid", param="response_format.json_schema.schema")
    return StructuredOutput(json_schema=schema or {"type": "object"})


def _constraint(req: ChatCompletionRequest) -> StructuredOutput | None:
    formatted = _structured(req.response_format)
    if formatted is not None and req.structured_outputs is not None:
        raise InvalidRequest("response_format and structured_outputs cannot be combined", param="structured_outputs")
    return formatted or _extension_structured(req.structured_outputs)


def _extension_structured(spec: StructuredOutputs | None) -> StructuredOutput | None:
    """vLLM's `structured_outputs` extension (checked against `response_format` by the caller): exactly one of
    `json`, `json_object`, `choice` or `regex`."""
    if spec is None:
        return None
    given = [
        name
        for name in ("json", "json_object", "choice", "regex", "grammar", "structural_tag")
        if getattr(spec, "json_" if name == "json" else name) not in (None, False)
    ]
    if len(given) != 1:
        raise InvalidRequest(
            f"structured_outputs takes exactly one of json, json_object, choice or regex, got {given or 'none'}",
            param="structured_outputs",
        )
    (name,) = given
    if name in ("grammar", "structural_tag"):
        raise InvalidRequest(
            f"structured_outputs.{name} is not supported; use json, json_object, choice or regex",
            param=f"structured_outputs.{name}",
            code="unsupported_parameter",
        )
    if name == "choice":
        assert spec.choice is not None
        if any(not c for c in spec.choice):
            raise InvalidRequest("a choice cannot be empty", param="structured_outputs.choice")
        return StructuredOutput(choice=tuple(spec.choice))
    if name == "regex":
        try:
            re.compile(spec.regex or "")
        except re.error as exc:
            raise InvalidRequest(f"the regex is not valid: {exc}", param="structured_outputs.regex") from exc
        return StructuredOutput(regex=spec.regex)
    if name == "json_object":
        return StructuredOutput(json_object=True)
    assert spec.json_ is not None
    return StructuredOutput(json_schema=spec.json_)


def _tool_plan(req: ChatCompletionRequest) -> ToolPlan | None:
    if not req.tools:
        if req.tool_choice not in (None, "none"):
            raise InvalidRequest("tool_choice needs `tools`", param="tool_choice", code="invalid_tool_choice")
        return None
    choice = req.tool_choice or AUTO
    name = choice if isinstance(choice, str) else choice.function.name
    tools = tuple(ToolSpec(t.function.name, t.function.description, t.function.parameters) for t in req.tools)
    return ToolPlan(tools, name, req.parallel_tool_calls)
