"""Parses requests, naming the offending `param` on every error: bodies into wire structs, and a chat request into
the `GenerationRequest` that serving takes."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from pydantic import BaseModel, ValidationError

from api.fields import check_fields, logit_bias
from api.protocol import ChatCompletionRequest, ResponseFormat
from serving.engine import GenerationParams, StructuredOutput
from serving.errors import InvalidRequest
from serving.service import GenerationRequest
from serving.tools import AUTO, ToolPlan, ToolSpec

logger = logging.getLogger(__name__)


def _param_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif str(part) in ("str", "list[ContentPart]", "function-after[...]") or "[" in str(part):
            continue  # pydantic's union-branch labels are not part of the client's path
        else:
            path += f".{part}" if path else str(part)
    return path


def _unknown_fields(model: BaseModel, prefix: str = "") -> list[str]:
    found = [f"{prefix}{key}" for key in (model.model_extra or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        children = value if isinstance(value, list) else [value]
        for i, child in enumerate(children):
            if isinstance(child, BaseModel):
                index = f"[{i}]" if isinstance(value, list) else ""
                found.extend(_unknown_fields(child, f"{prefix}{name}{index}."))
    return found


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _decode(body: bytes) -> Any:
    """Standard JSON only (no NaN or Infinity). JSON may escape a surrogate half on its own, which Python keeps and
    no tokenizer can encode: a body with any surrogate escape (the regular expression spares the exact check for
    the rest) has its decoded text checked for one."""
    data = json.loads(body, parse_constant=_refuse_constant)
    if _SURROGATE_ESCAPE.search(body) is None:
        return data
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(
            "the body holds a lone UTF-16 surrogate escape (\\ud800-\\udfff), which is not text", code="invalid_json"
        ) from None
    return data


def read_json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object of text, or a 400 saying why it is not one. Both OpenAI routes read their bodies
    here, so that neither can fail on input the other refuses."""
    try:
        data = _decode(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc}", code="invalid_json") from exc
    except RecursionError as exc:
        raise InvalidRequest("the body nests too deeply", code="invalid_json") from exc
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object", code="invalid_json")
    return data


async def refuse_nul_in_path(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """A guard: no identifier holds NUL (0x00), and PostgreSQL text cannot, so a path with one (`%00`) is a 400
    naming the parameter rather than a database error."""
    for name, value in connection.path_params.items():
        if isinstance(value, str) and "\x00" in value:
            raise InvalidRequest(f"'{name}' holds a NUL character", param=name)


class JsonRequest(Request[Any, Any, Any]):
    """Litestar's request for routes whose JSON bodies Litestar decodes itself (the admin API): a body nested past
    the decoder's recursion limit is the same 400 as on the OpenAI routes, not a `RecursionError`."""

    async def json(self) -> Any:
        try:
            return await super().json()
        except RecursionError as exc:
            raise InvalidRequest("the body nests too deeply", code="invalid_json") from exc


def parse_chat_request(body: bytes) -> ChatCompletionRequest:
    data = read_json_object(body)
    try:
        req = ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = _param_path(tuple(first["loc"])) or None
        missing = first["type"] == "missing"
        message = f"missing required field '{param}'" if missing else f"invalid value for '{param}': {first['msg']}"
        raise InvalidRequest(message, param=param, code="missing_field" if missing else "invalid_value") from exc
    unknown = _unknown_fields(req)
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
        structured=_structured(req.response_format),
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


def _tool_plan(req: ChatCompletionRequest) -> ToolPlan | None:
    if not req.tools:
        if req.tool_choice not in (None, "none"):
            raise InvalidRequest("tool_choice needs `tools`", param="tool_choice", code="invalid_tool_choice")
        return None
    choice = req.tool_choice or AUTO
    name = choice if isinstance(choice, str) else choice.function.name
    tools = tuple(ToolSpec(t.function.name, t.function.description, t.function.parameters) for t in req.tools)
    return ToolPlan(tools, name, req.parallel_tool_calls)
