"""The API's OpenAPI document (`GET /schema/openapi.json`): each operation's request body, its answers and every
error status it can send, so that a client, or a fuzzer, can hold the server to what it says."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from litestar import Request
from litestar.dto import AbstractDTO
from litestar.dto.data_structures import DTOFieldDefinition
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import Components, OpenAPIMediaType, Operation, Reference, Schema, SecurityScheme
from litestar.openapi.spec.enums import OpenAPIType
from litestar.typing import FieldDefinition

from api.protocol import ErrorResponse

T = TypeVar("T")

# Bodies larger than this are parsed on a worker thread: a body of many MB of base64 media takes tens to hundreds
# of milliseconds to decode and validate, which on the event loop would stall every other request and `/health`.
PARSE_OFF_LOOP_BYTES = 64 * 1024
_PARSED = "tessera.parsed_body"

BEARER = "bearer"
SECURED: list[dict[str, list[str]]] = [{BEARER: []}]

# Why each error status happens; an operation lists those it can send.
_WHY: dict[int, str] = {
    400: "The request is invalid: `error.param` names the offending field.",
    401: "The API key is missing, wrong, revoked or expired.",
    403: "The key may not do this (an admin route, or a model outside the key's allowed models).",
    404: "The model, record or tenant does not exist.",
    409: "The request conflicts with existing state.",
    413: "The body is larger than the server accepts.",
    429: "A rate limit or quota is exhausted; `retry-after` says when to retry.",
    503: "No engine can serve the request now (overloaded, starting or failed); `retry-after` says when to retry.",
}


def errors(*statuses: int) -> dict[int, ResponseSpec]:
    """The error answers of an operation, all in OpenAI's error shape."""
    return {
        status: ResponseSpec(ErrorResponse, description=_WHY[status], generate_examples=False) for status in statuses
    }


def answer(model: type[Any], description: str, status: int = 200) -> dict[int, ResponseSpec]:
    return {status: ResponseSpec(model, description=description, generate_examples=False)}


# One server-sent event (OpenAPI 3.1 reads an event stream's `schema` as the schema of each event).
EVENT_SCHEMA = Schema(
    type=OpenAPIType.OBJECT,
    properties={
        "event": Schema(type=OpenAPIType.STRING, description="The event's type, where the API names one."),
        "data": Schema(
            type=OpenAPIType.STRING,
            description="A JSON object (a chunk, a typed event or an error in OpenAI's shape), or `[DONE]` last.",
        ),
    },
    required=["data"],
)


@dataclass
class StreamingOperation(Operation):
    """An operation whose success answer is JSON, or server-sent events when the body asks for `stream: true`."""

    def __post_init__(self) -> None:
        ok = (self.responses or {}).get("200")
        if ok is not None and not isinstance(ok, Reference) and ok.content is not None:
            ok.content["text/event-stream"] = OpenAPIMediaType(schema=EVENT_SCHEMA)


# A route handler's `opt` key: the caller's room for another request (its concurrency slot and token budget) is
# checked by a guard, before the body is read or parsed, so a caller at its limits costs no parsing.
PRECHECK = "precheck_caller"


class ParsedBody(AbstractDTO[T], Generic[T]):
    """A JSON body read by Tessera's own parser, which names the offending `param` in every 400, and documented by
    the wire struct that parser validates against. A subclass names the struct and the parser:

        class ChatBody(ParsedBody[ChatCompletionRequest]):
            parse = staticmethod(parse_chat_request)

    Its route sets `before_request=ChatBody.parse_large_off_loop`, so that a large body is parsed on a worker
    thread before Litestar asks the DTO for it (a DTO's decoding is synchronous, on the event loop).
    """

    @staticmethod
    def parse(body: bytes) -> Any:
        raise NotImplementedError("a subclass names its parser")

    @classmethod
    async def parse_large_off_loop(cls, request: Request[Any, Any, Any]) -> None:
        """A `before_request` hook: parse a large body on a worker thread, for `decode_bytes` to pick up. It
        returns nothing, so the handler runs as usual; a parse error is the same 400 the handler would give."""
        body = await request.body()
        if len(body) > PARSE_OFF_LOOP_BYTES:
            request.scope[_PARSED] = await asyncio.to_thread(cls.parse, body)  # type: ignore[literal-required]

    def decode_bytes(self, value: bytes) -> Any:
        parsed = self.asgi_connection.scope.get(_PARSED)  # type: ignore[misc]
        return parsed if parsed is not None else self.parse(value)

    def decode_builtins(self, value: dict[str, Any]) -> Any:
        raise NotImplementedError("these bodies are JSON, never forms")

    @classmethod
    def create_for_field_definition(
        cls, field_definition: FieldDefinition, handler_id: str, backend_cls: Any = None
    ) -> None:
        """Nothing to build: the parser does the work Litestar's DTO backends would."""

    @classmethod
    def create_openapi_schema(cls, field_definition: FieldDefinition, handler_id: str, schema_creator: Any) -> Any:
        return schema_creator.for_field_definition(FieldDefinition.from_annotation(cls.model_type))

    @classmethod
    def generate_field_definitions(cls, model_type: type[Any]) -> Generator[DTOFieldDefinition, None, None]:
        raise NotImplementedError("the parser, not a DTO backend, reads these bodies")

    @classmethod
    def detect_nested_field(cls, field_definition: FieldDefinition) -> bool:
        return False


def openapi_config(version: str) -> OpenAPIConfig:
    return OpenAPIConfig(
        title="Tessera",
        version=version,
        description="An OpenAI-compatible multimodal inference gateway. Errors use OpenAI's error shape.",
        path="/schema",
        render_plugins=[JsonRenderPlugin()],
        components=Components(
            security_schemes={
                BEARER: SecurityScheme(
                    type="http", scheme="bearer", description="A tenant's API key, or the admin key on /admin routes."
                )
            }
        ),
    )
