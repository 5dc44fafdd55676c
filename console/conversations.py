"""Console conversation page: a named conversation of the tenant's, its items oldest first (text in full, media
named by kind), and the stored responses that answered in it, each linking to its receipt."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import FromPath
from litestar.response import Template

from console.pages import page
from serving.errors import NotFound
from storage.conversations import ConversationStore
from storage.responses import ResponseStore
from tenancy.directory import Principal

SHOWN_ITEMS = 100  # the newest this many (one page of the store); the API pages through the rest

MEDIA_NAMES = {"input_image": "[image]", "input_audio": "[audio clip]", "input_file": "[file]"}


def _shown(item: dict[str, Any]) -> dict[str, Any]:
    kind = item.get("type") or "message"
    if kind == "function_call":
        return {"id": item.get("id"), "who": "tool call", "text": f"{item.get('name')}({item.get('arguments')})"}
    if kind == "function_call_output":
        return {"id": item.get("id"), "who": "tool output", "text": str(item.get("output"))}
    content = item.get("content")
    parts = content if isinstance(content, list) else [{"type": "input_text", "text": content}]
    text = " ".join(
        MEDIA_NAMES.get(str(p.get("type")), "") or str(p.get("text") or p.get("refusal") or "") for p in parts
    )
    return {"id": item.get("id"), "who": item.get("role"), "text": text}


class ConversationsController(Controller):
    path = "/console/conversations"

    @get("/{conversation_id:str}")
    async def conversation(
        self,
        conversation_id: FromPath[str],
        signed_in: NamedDependency[Principal],
        conversations: NamedDependency[ConversationStore | None],
        stored_responses: NamedDependency[ResponseStore | None],
    ) -> Template:
        tenant = signed_in.tenant_id
        if conversations is None or tenant is None:
            raise NotFoundException("this server keeps no conversations")
        try:
            row = await asyncio.to_thread(conversations.get, tenant, conversation_id)
            newest = await asyncio.to_thread(conversations.items, tenant, conversation_id, limit=SHOWN_ITEMS)
        except NotFound as exc:
            raise NotFoundException(f"no conversation '{conversation_id}' for this tenant") from exc
        answered = []
        if stored_responses is not None:
            answered = await asyncio.to_thread(stored_responses.in_conversation, tenant, conversation_id)
        return page(
            "console/conversation.html.jinja2",
            area="tenant",
            active="requests",
            tenant=signed_in.tenant_name,
            conversation=row,
            items=[_shown(item) for item in reversed(newest.data)],
            older=newest.has_more,
            responses=answered,
        )
