"""Parses request bodies into wire structs, naming the offending `param` on every error, and turns a chat
request into the `GenerationRequest` that serving takes."""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import BaseModel, ValidationError

from api.protocol import ChatCompletionRequest
from serving.engine import GenerationParams
from serving.errors import InvalidRequest
from serving.service import GenerationRequest

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


def parse_chat_request(body: bytes) -> ChatCompletionRequest:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc}", code="invalid_json") from exc
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object", code="invalid_json")
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
    if req.n != 1:
        raise InvalidRequest(
            "only n=1 is supported; send parallel requests for more choices", param="n", code="unsupported_parameter"
        )
    params = GenerationParams(
        max_tokens=req.completion_limit() or default_max_tokens,
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
    )
    return GenerationRequest(req.model, req.messages, params, req.priority, req.allow_degraded)
