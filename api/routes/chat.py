"""POST /v1/chat/completions."""

from __future__ import annotations

import time
from typing import Any

from litestar import Request, Response, post
from litestar.response import Stream

from api.auth import key_salt
from api.chat_serving import ChatService
from api.parsing import parse_chat_request
from api.streaming import complete, stream
from tenancy.directory import Principal


@post("/v1/chat/completions", status_code=200)
async def create_chat_completion(
    request: Request[Any, Any, Any], chat: ChatService, principal: Principal
) -> Response[Any] | Stream:
    started = time.monotonic()
    req = parse_chat_request(await request.body())
    gen = await chat.prepare(req, started, principal, cache_salt=key_salt(principal))
    return await (stream(chat, req, gen) if req.stream else complete(chat, req, gen))
