"""OpenAI wire structs for chat completions: snake_case, fields in the OpenAI docs' order."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

# The seeds the engine's random generator takes (torch's `manual_seed`): int64 and uint64 values.
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1


class _Loose(BaseModel):
    """Accepts unknown fields, so clients on newer SDKs are never refused; the route logs them."""

    model_config = ConfigDict(extra="allow")


class ImageURL(_Loose):
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class InputAudio(_Loose):
    data: str
    format: str


class ContentPart(_Loose):
    """Any content part; the pipeline checks the `type` so that an unknown one gets a precise error."""

    type: str
    text: str | None = None
    image_url: ImageURL | None = None
    input_audio: InputAudio | None = None


class FunctionCall(_Loose):
    name: str
    arguments: str  # JSON text, as the model wrote it


class ToolCallIn(_Loose):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Loose):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None  # assistant turns that called tools
    tool_call_id: str | None = None  # tool turns: which call this is the result of


class FunctionDefinition(_Loose):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Loose):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(_Loose):
    name: str


class NamedToolChoice(_Loose):
    type: Literal["function"]
    function: NamedFunction


class JSONSchemaFormat(_Loose):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Loose):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


class StructuredOutputs(_Loose):
    """vLLM's `structured_outputs` extension: one constraint on the answer."""

    json_: dict[str, Any] | None = Field(default=None, alias="json")
    json_object: StrictBool | None = None
    choice: list[str] | None = Field(default=None, min_length=1, max_length=256)
    regex: str | None = Field(default=None, min_length=1, max_length=4096)
    grammar: str | None = None
    structural_tag: str | None = None


class StreamOptions(_Loose):
    include_usage: bool = False


class ChatCompletionRequest(_Loose):
    messages: list[ChatMessage] = Field(min_length=1)
    model: str
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    max_completion_tokens: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    logprobs: StrictBool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    n: int = Field(default=1, ge=1, le=16)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=SEED_MIN, le=SEED_MAX)
    response_format: ResponseFormat | None = None
    stop: str | list[str] | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: StrictBool = True
    user: str | None = None
    # Accepted with no effect on the answer (identifiers and hints); see api/chat/fields.py.
    metadata: dict[str, str] | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    service_tier: str | None = None
    store: StrictBool | None = None
    modalities: list[str] | None = None
    # Extensions, as vLLM's server names them.
    top_k: int | None = Field(default=None, ge=-1)
    min_tokens: int = Field(default=0, ge=0)
    repetition_penalty: float = Field(default=1.0, gt=0.0)
    ignore_eos: bool = False
    return_token_ids: bool = False
    structured_outputs: StructuredOutputs | None = None
    # Tessera's extensions.
    priority: Literal["interactive", "batch"] = "interactive"
    allow_degraded: bool = Field(
        default=False, description="If an encoder pool fails, answer without that media instead of failing (503)."
    )

    def completion_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0
    text_tokens: int = 0
    image_tokens: int = 0
    audio_tokens: int = 0
    cached_image_tokens: int = 0  # extension: image tokens served from the embedding cache
    cached_audio_tokens: int = 0  # extension: audio tokens served from the embedding cache


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails = Field(default_factory=PromptTokensDetails)


def _omitted_when_none() -> Any:
    """A field that leaves the JSON when it is None: OpenAI omits these keys rather than sending null, and
    Tessera's extensions appear only when asked for."""
    return Field(default=None, exclude_if=lambda value: value is None)


class FunctionCallOut(BaseModel):
    name: str
    arguments: str


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallOut


class ResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: str | None = None  # OpenAI always sends the key, null unless the model refused
    tool_calls: list[ToolCallOut] | None = _omitted_when_none()


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None
    refusal: list[TokenLogprob] | None = None


class Choice(BaseModel):
    index: int = 0
    message: ResponseMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None
    token_ids: list[int] | None = _omitted_when_none()


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = _omitted_when_none()
    prompt_token_ids: list[int] | None = _omitted_when_none()
    degraded: dict[str, Any] | None = _omitted_when_none()


class DeltaFunction(BaseModel):
    name: str | None = _omitted_when_none()
    arguments: str | None = _omitted_when_none()


class DeltaToolCall(BaseModel):
    index: int
    id: str | None = _omitted_when_none()
    type: Literal["function"] | None = _omitted_when_none()
    function: DeltaFunction


class Delta(BaseModel):
    role: Literal["assistant"] | None = _omitted_when_none()  # OpenAI sends it on the first delta only
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = _omitted_when_none()


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None
    token_ids: list[int] | None = _omitted_when_none()


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None  # null on every chunk but the last when the client asked for usage, else omitted
    prompt_token_ids: list[int] | None = _omitted_when_none()
    degraded: dict[str, Any] | None = _omitted_when_none()
