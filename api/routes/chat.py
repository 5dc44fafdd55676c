"""POST /v1/chat/completions."""

from __future__ import annotations

from typing import Any

from litestar import Response, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.response import Stream

from api.chat.parsing import parse_chat_request
from api.chat.protocol import ChatCompletion, ChatCompletionRequest
from api.chat.service import answer_chat
from api.openapi import PRECHECK, ParsedBody, StreamingOperation, answer, errors
from config.settings import Settings
from serving.service import InferenceService
from tenancy.directory import Principal
from tenancy.quotas import QuotaGate


class ChatBody(ParsedBody[ChatCompletionRequest]):
    parse = staticmethod(parse_chat_request)


@post(
    "/v1/chat/completions",
    status_code=200,
    dto=ChatBody,
    before_request=ChatBody.parse_large_off_loop,
    return_dto=None,
    operation_class=StreamingOperation,
    opt={PRECHECK: True},
    responses={
        **answer(ChatCompletion, "The completion; with `stream: true`, `chat.completion.chunk` events instead."),
        **errors(400, 401, 403, 404, 413, 429, 503),
    },
)
async def create_chat_completion(
    data: JSONBody[ChatCompletionRequest],
    principal: NamedDependency[Principal],
    service: NamedDependency[InferenceService],
    quotas: NamedDependency[QuotaGate],
    settings: NamedDependency[Settings],
) -> Response[Any] | Stream:
    return await answer_chat(data, principal, service, quotas, default_max_tokens=settings.default_max_tokens)
