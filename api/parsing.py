"""What every endpoint's parser shares: the body as a JSON object of text, the client's path to a field in an
error (`param`), the fields a request sent that no struct declares, and guards on path parameters."""

from __future__ import annotations

import json
import re
from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from pydantic import BaseModel

from serving.errors import InvalidRequest


def param_path(loc: tuple[Any, ...]) -> str:
    """The client's path to a field from a pydantic error location: `messages[0].content[1].image_url.url`.
    Pydantic's labels for union branches (`str`, a class name, `list[ContentPart]`, `function-after[...]`) are not
    part of it."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
            continue
        label = str(part)
        if label == "str" or label[:1].isupper() or "[" in label:
            continue
        path += f".{label}" if path else label
    return path


def unknown_fields(model: BaseModel, prefix: str = "") -> list[str]:
    """Every field of `model` and its nested models that no struct declares, as client paths (`tools[0].strict`)."""
    found = [f"{prefix}{key}" for key in (model.model_extra or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        for i, child in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(child, BaseModel):
                index = f"[{i}]" if isinstance(value, list) else ""
                found.extend(unknown_fields(child, f"{prefix}{name}{index}."))
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
