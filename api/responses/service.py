"""`POST /v1/responses` on the same lease as chat completions: the request becomes chat turns and one
`GenerationRequest` (api.responses.parsing), serving admits it under the caller's policy and its grounding
guardrail (serving.gate), and the completion renders as one `response` object or typed SSE events
(api.responses.rendering). Under `flag` the verdict rides on the response as `grounding` (on `response.completed`
when streamed); under `block` a failed whole answer is regenerated once, then refused as a `refusal` part."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from litestar import Response
from litestar.response import Stream

from api.auth import tenant_of
from api.responses.parsing import Conversation, generation_request, to_conversation
from api.responses.protocol import ResponsesRequest
from api.responses.rendering import RESPONSE_PREFIX, complete_body, headers, queued_body, refusal, stream
from api.responses.storing import conversation_turns, earlier_turns, keep, own_items, retention_days, stores
from grounding.guardrail import REFUSAL
from jobs.runner import JobRunner
from serving.completion import Completion
from serving.errors import InvalidRequest, TesseraError
from serving.service import GenerationRequest, InferenceService
from storage.conversations import ConversationStore
from storage.responses import ResponseStore
from tenancy.directory import Principal
from tenancy.quotas import QuotaGate

BACKGROUND_JOB = "response"
_INPUT_ITEM = re.compile(r"input\[(\d+)\]")


@dataclass(frozen=True)
class Turn:
    """One request to the Responses API made ready: the conversation it continues replayed ahead of its own
    input, the request serving takes, and whether it is stored."""

    req: ResponsesRequest  # the client's request, with `store` resolved
    principal: Principal
    store: ResponseStore | None
    conversations: ConversationStore | None
    earlier: int  # items replayed from the history ahead of the request's own
    conversation: Conversation
    request: GenerationRequest

    @property
    def param(self) -> Callable[[str | None], str | None]:
        history = "conversation" if self.req.conversation_id is not None else "previous_response_id"
        return _param(self.conversation, self.earlier, history)

    async def keep(self, body: dict[str, Any], completion: Completion) -> None:
        store = self.store if self.req.store else None
        if store is None and self.req.conversation_id is None:
            return
        await asyncio.to_thread(
            keep,
            self.principal,
            self.req,
            body,
            completion,
            self.earlier,
            self.conversation.param,
            store=store,
            conversations=self.conversations,
        )


def prepare(
    req: ResponsesRequest,
    principal: Principal,
    store: ResponseStore | None,
    conversations: ConversationStore | None = None,
    *,
    default_max_tokens: int,
) -> Turn:
    """Resolves `store`, replays the history `previous_response_id` or `conversation` names, and builds the
    request."""
    stored = store is not None and stores(req, principal)
    req = req.model_copy(update={"store": stored})
    earlier = []
    if req.previous_response_id is not None:
        if store is None:
            raise InvalidRequest("this server keeps no responses", param="previous_response_id")
        earlier = earlier_turns(store, principal, req.previous_response_id)
    elif req.conversation_id is not None:
        if conversations is None:
            raise InvalidRequest("this server keeps no conversations", param="conversation")
        earlier = conversation_turns(conversations, principal, req.conversation_id)
    full = req.model_copy(update={"input": [*earlier, *own_items(req)]}) if earlier else req
    conversation = to_conversation(full)
    request = generation_request(full, conversation, default_max_tokens)
    return Turn(req, principal, store, conversations, len(earlier), conversation, request)


async def answer_whole(
    turn: Turn, service: InferenceService, quotas: QuotaGate, *, finish: Callable[[dict[str, Any]], None] | None = None
) -> tuple[dict[str, Any], Completion]:
    """The whole answer through the caller's guardrail, rendered as a `response` object and kept when stored;
    `finish` may amend the body before it is kept."""
    req = turn.req

    async def render(completion: Completion) -> dict[str, Any]:
        return await complete_body(req, completion)

    try:
        answer = await service.answer(turn.request, quotas.policy(turn.principal), render)
    except TesseraError as exc:
        exc.param = turn.param(exc.param)
        raise
    body = refusal(answer.body, REFUSAL) if answer.refused else answer.body
    if (verdict := answer.grounding()) is not None:
        body["grounding"] = verdict
    if finish is not None:
        finish(body)
    await turn.keep(body, answer.completion)
    return body, answer.completion


async def create_response(
    req: ResponsesRequest,
    principal: Principal,
    service: InferenceService,
    quotas: QuotaGate,
    store: ResponseStore | None,
    conversations: ConversationStore | None = None,
    *,
    default_max_tokens: int,
    jobs: JobRunner | None = None,
) -> Response[Any] | Stream:
    """A request `parse_responses_request` has read (the route's body DTO runs it): replay its history, start it
    (or queue it, in the background), render it, and keep it when it is stored or names a conversation."""
    turn = prepare(req, principal, store, conversations, default_max_tokens=default_max_tokens)
    if turn.req.background:
        return Response(await queue(turn, jobs), status_code=200)
    if turn.req.stream:
        policy = quotas.policy(principal)
        try:
            completion = await service.start(turn.request, policy)
        except TesseraError as exc:
            exc.param = turn.param(exc.param)
            raise
        verdict = service.stream_verdict(policy, completion)
        return await stream(turn.req, completion, turn.param, verdict, turn.keep)
    body, completion = await answer_whole(turn, service, quotas)
    return Response(body, headers=headers(completion))


async def queue(turn: Turn, jobs: JobRunner | None) -> dict[str, Any]:
    """A background response: stored as `queued` and handed to the job runner (api.responses.background runs it
    as batch-priority work); the client polls `GET /v1/responses/{id}` or cancels it."""
    req, store = turn.req, turn.store
    if jobs is None or store is None:
        raise InvalidRequest("this server runs no background responses", param="background")
    if not req.store:
        raise InvalidRequest("a background response must be stored; leave out `store: false`", param="store")
    if req.stream:
        raise InvalidRequest("a background response does not stream; poll GET /v1/responses/{id}", param="stream")
    token = uuid.uuid4().hex
    body = queued_body(req, RESPONSE_PREFIX + token)
    tenant = tenant_of(turn.principal, "stored responses")
    await asyncio.to_thread(
        store.save,
        tenant_id=tenant,
        body=body,
        input_items=[],
        media={},
        request_id="",
        retention_days=retention_days(turn.principal),
        previous_response_id=req.previous_response_id,
        conversation_id=req.conversation_id,
    )
    payload = {
        "response_id": body["id"],
        "key_id": turn.principal.key_id,
        "request": req.model_dump(mode="json", exclude_none=True),
    }
    try:
        await asyncio.to_thread(jobs.enqueue, BACKGROUND_JOB, payload, tenant_id=tenant, job_id=job_id(body["id"]))
    except Exception:
        await asyncio.to_thread(
            store.set_status,
            tenant,
            body["id"],
            "failed",
            {"code": "server_error", "message": "the response could not be queued"},
        )
        raise
    return body


def job_id(response_id: str) -> str:
    """The job that runs a background response."""
    return "job_" + response_id.removeprefix(RESPONSE_PREFIX)


def _param(conversation: Conversation, earlier: int, history: str) -> Callable[[str | None], str | None]:
    """Maps serving's `param` to the client's request, whose input starts after the `earlier` items replayed from
    the field `history` names."""

    def param(found: str | None) -> str | None:
        mapped = conversation.param(found)
        at = _INPUT_ITEM.match(mapped or "")
        if at is None or not earlier:
            return mapped
        index = int(at[1]) - earlier
        return history if index < 0 else f"input[{index}]{mapped[at.end() :]}"  # type: ignore[index]

    return param
