"""Function tools: what a request offers, how the engine is constrained to call them, and how its output
becomes tool calls.

- `required` and a named function are enforced by structured output: the engine can only write a call whose
  arguments validate against the function's `parameters` (an array of calls, or the named one's arguments).
- `auto` leaves the choice to the model; the pool's tool-call parser (one of vLLM's, matching its chat
  template) finds the calls in the text. A pool without a parser refuses `auto`.
- `none` renders no tools and never calls one.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from serving.engines.base import EngineDelta, StructuredOutput
from serving.errors import InvalidRequest

NONE, AUTO, REQUIRED = "none", "auto", "required"


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None

    def template_form(self) -> dict[str, Any]:
        """The tool as chat templates take it (OpenAI's function-tool shape)."""
        function: dict[str, Any] = {"name": self.name, "parameters": self.parameters or _EMPTY}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


_EMPTY: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolPlan:
    tools: tuple[ToolSpec, ...]
    choice: str = AUTO  # none | auto | required | the name of one function
    parallel: bool = True

    def __post_init__(self) -> None:
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise InvalidRequest("tool names must be unique", param="tools", code="invalid_tools")
        if self.choice not in (NONE, AUTO, REQUIRED) and self.choice not in names:
            raise InvalidRequest(
                f"tool_choice names the function '{self.choice}', which is not in `tools`",
                param="tool_choice",
                code="invalid_tool_choice",
            )
        if self.choice != NONE and not self.tools:
            raise InvalidRequest("tool_choice needs `tools`", param="tool_choice", code="invalid_tool_choice")

    @property
    def named(self) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == self.choice), None)

    def rendered_tools(self) -> list[dict[str, Any]] | None:
        """Tools for the chat template: the named one only, none for `none`."""
        if self.choice == NONE:
            return None
        named = self.named
        return [named.template_form()] if named else [t.template_form() for t in self.tools]

    def constraint(self) -> StructuredOutput | None:
        """The structured-output constraint that makes `required` and a named choice always well formed."""
        named = self.named
        if named is not None:
            return StructuredOutput(json_schema=named.parameters or _EMPTY)
        if self.choice != REQUIRED:
            return None
        schema: dict[str, Any] = {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "anyOf": [
                    {
                        "properties": {
                            "name": {"type": "string", "enum": [t.name]},
                            "parameters": t.parameters or _EMPTY,
                        },
                        "required": ["name", "parameters"],
                    }
                    for t in self.tools
                ],
            },
        }
        if not self.parallel:
            schema["maxItems"] = 1
        return StructuredOutput(json_schema=schema)


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of one tool call: its first piece carries the id and name, later ones more arguments."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text


@dataclass(frozen=True)
class DecodedDelta:
    content: str | None = None
    tool_calls: tuple[ToolCallDelta, ...] = ()


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class OutputDecoder:
    """Turns one choice's text into content and tool calls, delta by delta. Without tools it passes text on."""

    plan: ToolPlan | None = None
    parser: Any = None  # a vLLM tool parser instance, for `auto`
    parser_request: Any = None
    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    _token_ids: list[int] = field(default_factory=list)
    _named_id: str | None = None

    @property
    def mode(self) -> str:
        if self.plan is None or self.plan.choice == NONE:
            return NONE
        return "named" if self.plan.named else self.plan.choice

    def feed(self, delta: EngineDelta) -> DecodedDelta:
        previous, previous_ids = self.text, list(self._token_ids)
        self.text += delta.text
        self._token_ids.extend(delta.token_ids)
        mode = self.mode
        if mode == NONE:
            return DecodedDelta(content=delta.text)
        if mode == "named":
            return self._named_piece(delta.text)
        if mode == REQUIRED:
            return DecodedDelta()  # a JSON array of calls: emitted whole once it has closed
        streamed = self.parser.extract_tool_calls_streaming(
            previous, self.text, delta.text, previous_ids, self._token_ids, delta.token_ids, self.parser_request
        )
        return _from_vllm_delta(streamed)

    def _named_piece(self, text: str) -> DecodedDelta:
        named = self.plan.named if self.plan else None
        assert named is not None
        if self._named_id is None:
            self._named_id = call_id()
            return DecodedDelta(tool_calls=(ToolCallDelta(0, self._named_id, named.name, text),))
        return DecodedDelta(tool_calls=(ToolCallDelta(0, arguments=text),)) if text else DecodedDelta()

    def finish(self) -> DecodedDelta:
        """At the end of the choice: the final tool calls (kept in `calls`), and what is left to stream."""
        mode = self.mode
        if mode == "named":
            named = self.plan.named if self.plan else None
            assert named is not None
            self.calls = [ToolCall(self._named_id or call_id(), named.name, self.text)]
            return DecodedDelta()
        if mode == REQUIRED:
            self.calls = _required_calls(self.text)
            pieces = tuple(ToolCallDelta(i, c.id, c.name, c.arguments) for i, c in enumerate(self.calls))
            return DecodedDelta(tool_calls=pieces)
        if mode == AUTO:
            found = self.parser.extract_tool_calls(self.text, self.parser_request)
            if found.tools_called:
                self.calls = [
                    ToolCall(c.id or call_id(), c.function.name, c.function.arguments) for c in found.tool_calls
                ]
        return DecodedDelta()

    def content(self) -> str | None:
        """The choice's text content, once finished: none when it called tools."""
        if self.mode in ("named", REQUIRED):
            return None
        if self.mode == AUTO and self.calls:
            start = self.text.find(getattr(self.parser, "tool_call_start_token", "\0"))
            return self.text[:start] or None if start >= 0 else None
        return self.text


def _required_calls(text: str) -> list[ToolCall]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError:
        return []  # cut off by max_tokens: the finish reason says so
    return [
        ToolCall(call_id(), str(item["name"]), json.dumps(item.get("parameters", {}), ensure_ascii=False))
        for item in items
        if isinstance(item, dict) and "name" in item
    ]


def _from_vllm_delta(message: Any) -> DecodedDelta:
    if message is None:
        return DecodedDelta()
    pieces = []
    for call in message.tool_calls or []:
        function = call.function
        pieces.append(
            ToolCallDelta(
                int(call.index),
                call.id,
                function.name if function else None,
                (function.arguments or "") if function else "",
            )
        )
    return DecodedDelta(content=message.content, tool_calls=tuple(pieces))


def make_decoder(plan: ToolPlan | None, parser_name: str | None, tokenizer: Any) -> OutputDecoder:
    """A decoder for one choice; `auto` needs the pool's vLLM tool parser."""
    if plan is None or plan.choice != AUTO:
        return OutputDecoder(plan)
    assert parser_name is not None, "the service refuses `auto` on a pool without a parser before it starts"
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager

    request = ChatCompletionRequest(
        model="tessera",
        messages=[{"role": "user", "content": ""}],
        tools=[t.template_form() for t in plan.tools],
        tool_choice="auto",
    )
    parser = ToolParserManager.get_tool_parser(parser_name)(tokenizer, request.tools)
    return OutputDecoder(plan, parser, request)
