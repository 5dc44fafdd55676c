"""OpenAI wire structs for the Responses API (`POST /v1/responses` and its stored responses): snake_case, fields
in the order OpenAI sends them.

Requests are read loosely, like chat requests: an input item or content part is one struct whose `type` the
conversion (`api.responses.parsing`) checks, so an unsupported one gets a precise error naming its place. OpenAI fields
that Tessera does not honour are listed in `UNHONOURED` with the values that ask for nothing; any other value is
refused with a 400 naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool


class _Loose(BaseModel):
    """Accepts unknown fields, so clients on newer SDKs are never refused; the route logs them."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


# -- the request ----------------------------------------------------------------------------------------------


class AudioData(_Loose):
    data: str
    format: str


class InputContent(_Loose):
    """Any content part: `input_text`, `input_image`, `input_audio`, and, in earlier assistant turns,
    `output_text` and `refusal`."""

    type: str
    text: str | None = None
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None
    input_audio: AudioData | None = None
    refusal: str | None = None


class InputItem(_Loose):
    """Any input item: a message (with or without `type`), or an earlier `function_call` and its
    `function_call_output`."""

    type: str | None = None
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: str | list[InputContent] | None = None
    id: str | None = None
    status: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[InputContent] | None = None


class FunctionTool(_Loose):
    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolChoiceObject(_Loose):
    type: str
    name: str | None = None


class TextFormat(_Loose):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(default=None, pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextConfig(_Loose):
    format: TextFormat = Field(default_factory=lambda: TextFormat(type="text"))
    verbosity: Literal["low", "medium", "high"] | None = None


class ConversationRef(_Loose):
    id: str = Field(min_length=1, max_length=64)


class ResponsesRequest(_Loose):
    model: str
    input: str | list[InputItem]
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    metadata: dict[str, str] | None = None
    parallel_tool_calls: StrictBool | None = None
    stream: StrictBool | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    text: TextConfig | None = None
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceObject | None = None
    tools: list[FunctionTool] | None = None
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    user: str | None = None
    # Hints that change nothing here, echoed back: identifiers, a cache-routing key, stream options.
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    stream_options: dict[str, Any] | None = None
    # Stored responses: kept unless `store` is false (the tenant's setting decides when it is left out), and a
    # stored response continued by id.
    store: StrictBool | None = None
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=64)
    # A named conversation (`/v1/conversations`): replayed ahead of the input, and the input and output appended.
    conversation: Annotated[str, Field(min_length=1, max_length=64)] | ConversationRef | None = None
    # Run it as batch-priority work and answer at once with a `queued` response to poll.
    background: StrictBool | None = None
    # Tessera's extensions, as on chat completions.
    priority: Literal["interactive", "batch"] = "interactive"
    allow_degraded: bool = False

    @property
    def conversation_id(self) -> str | None:
        """The id of the conversation the request names (`"conv_..."` or `{"id": "conv_..."}`), if any."""
        named = self.conversation
        return named if isinstance(named, str) or named is None else named.id


# OpenAI's fields that Tessera does not honour -> (the values that ask for nothing, why any other is refused).
UNHONOURED: dict[str, tuple[tuple[Any, ...], str]] = {
    "background_options": ((None,), "background responses take no options; poll or cancel them by id"),
    "include": ((None, []), "no additional output data can be included"),
    "reasoning": ((None, {}), "the served models do not reason; leave `reasoning` out"),
    "truncation": ((None, "disabled"), "inputs are never truncated; a too-long input is refused"),
    "prompt": ((None,), "stored prompt templates are not supported; send the prompt in `input`"),
    "max_tool_calls": ((None,), "there are no built-in tools to limit"),
    "top_logprobs": ((None, 0), "log probabilities are not returned by the Responses API here"),
    "context_management": ((None, []), "context management is not supported"),
    "moderation": ((None,), "moderation is not supported"),
    "access_programs": ((None,), "access programs are not supported"),
    "image": ((None,), "image context options are not supported"),
    "prompt_cache_options": ((None,), "prompt caching is automatic; its options are not supported"),
    "prompt_cache_retention": ((None,), "prompt cache retention cannot be chosen"),
    "service_tier": ((None, "auto", "default"), "there is one service tier"),
}


# -- the response ---------------------------------------------------------------------------------------------


ItemStatus = Literal["in_progress", "completed", "incomplete"]
# A response's status; a background one is `queued` first, and may end `failed` or `cancelled`.
ResponseStatus = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]


def _omitted_when_none() -> Any:
    return Field(default=None, exclude_if=lambda value: value is None)


class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] = Field(default_factory=list)
    text: str


class OutputRefusal(BaseModel):
    type: Literal["refusal"] = "refusal"
    refusal: str


class OutputMessage(BaseModel):
    id: str
    type: Literal["message"] = "message"
    status: ItemStatus
    content: list[OutputText | OutputRefusal]
    role: Literal["assistant"] = "assistant"


class FunctionCallItem(BaseModel):
    id: str
    type: Literal["function_call"] = "function_call"
    status: ItemStatus
    arguments: str
    call_id: str
    name: str


OutputItem = OutputMessage | FunctionCallItem


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    text_tokens: int = 0  # extensions, as in chat's prompt_tokens_details
    image_tokens: int = 0
    audio_tokens: int = 0
    cached_image_tokens: int = 0
    cached_audio_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens", "content_filter"]


class Reasoning(BaseModel):
    effort: None = None
    summary: None = None


class ResponseObject(BaseModel):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    background: bool = False
    error: dict[str, Any] | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    max_tool_calls: None = None
    model: str
    output: list[OutputItem] = Field(default_factory=list)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    conversation: dict[str, str] | None = None
    prompt_cache_key: str | None = None
    reasoning: Reasoning = Field(default_factory=Reasoning)
    safety_identifier: str | None = None
    service_tier: Literal["default"] = "default"
    store: bool = False
    temperature: float = 1.0
    text: dict[str, Any] = Field(default_factory=dict)
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    top_logprobs: int = 0
    top_p: float = 1.0
    truncation: Literal["disabled"] = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    degraded: dict[str, Any] | None = _omitted_when_none()  # extension, as on chat completions


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


class InputItemList(BaseModel):
    object: Literal["list"] = "list"
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
