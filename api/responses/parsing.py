"""A Responses API request as chat turns: its body into the wire struct (OpenAI fields Tessera does not honour
refused by name), its input items into chat messages (instructions first; earlier function calls become an
assistant turn's `tool_calls`, their outputs `tool` turns), and one `GenerationRequest`, with each error's `param`
mapped back to the client's place in `input`.

Ids: the lease names the request `chatcmpl-<hex>` (its usage row, `GET /v1/usage/chatcmpl-<hex>`); the response
is `resp_<hex>` with the same hex, and its `x-tessera-request-id` header carries the lease's id.
What is kept, and the history `previous_response_id` or `conversation` replays, is api.responses.storing's; the
OpenAI fields in `UNHONOURED` are refused unless they ask for nothing.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from api.chat.protocol import ChatMessage
from api.parsing import param_path, read_json_object, unknown_fields
from api.responses.protocol import UNHONOURED, InputContent, InputItem, ResponsesRequest, TextConfig
from serving.engines.base import GenerationParams, StructuredOutput
from serving.errors import InvalidRequest
from serving.service import GenerationRequest
from serving.tools import AUTO, NONE, ToolPlan, ToolSpec

logger = logging.getLogger(__name__)


def parse_responses_request(body: bytes) -> ResponsesRequest:
    data = read_json_object(body)
    refuse_unhonoured(data)
    try:
        req = ResponsesRequest.model_validate(data)
    except ValidationError as exc:
        first = max(exc.errors(), key=lambda e: len(e["loc"]))  # the deepest: inside the branch that fits best
        param = param_path(tuple(first["loc"])) or None
        if first["type"] == "missing":
            raise InvalidRequest(f"missing required field '{param}'", param=param, code="missing_field") from exc
        raise InvalidRequest(f"invalid value for '{param}': {first['msg']}", param=param, code="invalid_value") from exc
    if unknown := [f for f in unknown_fields(req) if f not in UNHONOURED]:  # those were checked above
        logger.info("accepted unknown request fields: %s", ", ".join(sorted(unknown)))
    return req


def refuse_unhonoured(data: dict[str, Any]) -> None:
    """A 400 for each OpenAI field Tessera does not honour, unless its value asks for nothing."""
    for name, (benign, reason) in UNHONOURED.items():
        value = data.get(name)
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if v is not None}
        if not any(value == ok and type(value) is type(ok) for ok in benign):
            raise InvalidRequest(f"'{name}' is not supported: {reason}", param=name, code="unsupported_parameter")


# -- input items to chat messages -------------------------------------------------------------------------------

_MESSAGE_PARAM = re.compile(r"messages\[(\d+)\](\.content)?(.*)")


@dataclass
class Conversation:
    """The chat messages of a request, each with where it came from: (item path, content path)."""

    messages: list[ChatMessage] = field(default_factory=list)
    origins: list[tuple[str, str]] = field(default_factory=list)

    def param(self, param: str | None) -> str | None:
        """A `param` that serving named in chat terms, in the Responses request's terms."""
        if param is None or param == "messages":
            return "input" if param else None
        if param.startswith("response_format"):
            return "text.format"
        found = _MESSAGE_PARAM.fullmatch(param)
        if found is None or int(found[1]) >= len(self.origins):
            return param
        item, content = self.origins[int(found[1])]
        return (content if found[2] else item) + found[3].replace(".image_url.url", ".image_url")


def to_conversation(req: ResponsesRequest) -> Conversation:
    turns: list[tuple[dict[str, Any], tuple[str, str]]] = []
    if req.instructions:
        turns.append(({"role": "system", "content": req.instructions}, ("instructions", "instructions")))
    if isinstance(req.input, str):
        turns.append(({"role": "user", "content": req.input}, ("input", "input")))
    elif not req.input:
        raise InvalidRequest("`input` has no items", param="input", code="missing_content")
    for i, item in enumerate(req.input if isinstance(req.input, list) else []):
        _add_item(item, f"input[{i}]", turns)
    return Conversation([ChatMessage.model_validate(t) for t, _ in turns], [o for _, o in turns])


def check_item(item: InputItem, param: str) -> None:
    """A 400 naming the place of whatever in the item a response could not read."""
    _add_item(item, param, [])


def _add_item(item: InputItem, param: str, turns: list[tuple[dict[str, Any], tuple[str, str]]]) -> None:
    kind = item.type or ("message" if item.role else None)
    if kind == "message":
        turns.append((_message(item, param), (param, f"{param}.content")))
    elif kind == "function_call":
        call = {"id": _need(item.call_id, param, "call_id"), "type": "function"}
        call["function"] = {
            "name": _need(item.name, param, "name"),
            "arguments": _need(item.arguments, param, "arguments"),
        }
        previous = turns[-1][0] if turns else None
        if previous is not None and previous["role"] == "assistant":
            previous.setdefault("tool_calls", []).append(call)  # calls join the assistant turn they belong to
        else:
            turns.append(({"role": "assistant", "content": None, "tool_calls": [call]}, (param, param)))
    elif kind == "function_call_output":
        turn = {"role": "tool", "tool_call_id": _need(item.call_id, param, "call_id")}
        turn["content"] = _tool_output(_need(item.output, param, "output"), f"{param}.output")
        turns.append((turn, (param, f"{param}.output")))
    elif kind == "item_reference":
        raise InvalidRequest(
            "item references are not supported; send the item itself",
            param=f"{param}.type",
            code="unsupported_parameter",
        )
    else:
        raise InvalidRequest(
            f"input item type {kind!r} is not supported; expected message, function_call or function_call_output",
            param=f"{param}.type",
            code="invalid_input_item",
        )


def _need(value: Any, param: str, name: str) -> Any:
    if value is None:
        raise InvalidRequest(f"missing required field '{param}.{name}'", param=f"{param}.{name}", code="missing_field")
    return value


def _message(item: InputItem, param: str) -> dict[str, Any]:
    role = _need(item.role, param, "role")
    content = _need(item.content, param, "content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    return {"role": role, "content": [_part(p, f"{param}.content[{j}]") for j, p in enumerate(content)]}


def _part(part: InputContent, param: str) -> dict[str, Any]:
    kind = part.type
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": _need(part.text, param, "text")}
    if kind == "refusal":
        return {"type": "text", "text": _need(part.refusal, param, "refusal")}
    if kind == "input_image":
        if part.file_id is not None:
            raise InvalidRequest(
                "file ids are not supported: send the image as `image_url`, a URL or a data URL",
                param=f"{param}.file_id",
                code="unsupported_parameter",
            )
        return {"type": "image_url", "image_url": {"url": _need(part.image_url, param, "image_url")}}
    if kind == "input_audio":
        audio = _need(part.input_audio, param, "input_audio")
        return {"type": "input_audio", "input_audio": {"data": audio.data, "format": audio.format}}
    if kind == "input_file":
        raise InvalidRequest("file inputs are not supported", param=f"{param}.type", code="unsupported_parameter")
    raise InvalidRequest(
        f"unknown content part type {kind!r}; expected input_text, input_image or input_audio",
        param=f"{param}.type",
        code="invalid_content_part",
    )


def _tool_output(output: str | list[InputContent], param: str) -> str:
    if isinstance(output, str):
        return output
    texts = []
    for j, part in enumerate(output):
        if part.type not in ("input_text", "output_text") or part.text is None:
            raise InvalidRequest(
                "a function call's output must be text", param=f"{param}[{j}].type", code="unsupported_parameter"
            )
        texts.append(part.text)
    return "".join(texts)


# -- the generation request ---------------------------------------------------------------------------------------


def generation_request(req: ResponsesRequest, conversation: Conversation, default_max_tokens: int) -> GenerationRequest:
    params = GenerationParams(
        max_tokens=req.max_output_tokens or default_max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        structured=_structured(req.text),
    )
    return GenerationRequest(
        req.model,
        conversation.messages,
        params,
        req.priority,
        req.allow_degraded,
        tools=tool_plan(req),
        buffered=not req.stream,
    )


def _structured(text: TextConfig | None) -> StructuredOutput | None:
    if text is not None and text.verbosity not in (None, "medium"):
        raise InvalidRequest(
            "only the default verbosity is supported", param="text.verbosity", code="unsupported_value"
        )
    fmt = text.format if text else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return StructuredOutput(json_object=True)
    _need(fmt.name, "text.format", "name")
    schema = _need(fmt.schema_, "text.format", "schema")
    if not isinstance(schema.get("type", "object"), str | list):
        raise InvalidRequest("the JSON schema is not valid", param="text.format.schema", code="invalid_value")
    return StructuredOutput(json_schema=schema)


def tool_plan(req: ResponsesRequest) -> ToolPlan | None:
    choice = req.tool_choice
    if choice is not None and not isinstance(choice, str) and (choice.type != "function" or not choice.name):
        raise InvalidRequest(
            "tool_choice must be none, auto, required or {'type': 'function', 'name': ...}",
            param="tool_choice",
            code="invalid_tool_choice",
        )
    name = choice if isinstance(choice, str) or choice is None else choice.name
    if not req.tools:
        if name not in (None, NONE, AUTO):
            raise InvalidRequest("tool_choice needs `tools`", param="tool_choice", code="invalid_tool_choice")
        return None
    specs = []
    for i, tool in enumerate(req.tools):
        if tool.type != "function":
            raise InvalidRequest(
                f"tools[{i}] is a {tool.type!r} tool; only function tools are supported",
                param="tools",
                code="unsupported_tool",
            )
        specs.append(ToolSpec(_need(tool.name, f"tools[{i}]", "name"), tool.description, tool.parameters))
    parallel = True if req.parallel_tool_calls is None else req.parallel_tool_calls
    return ToolPlan(tuple(specs), name or AUTO, parallel)
