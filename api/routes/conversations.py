"""The Conversations API: POST /v1/conversations; GET, POST (metadata) and DELETE /v1/conversations/{id}; GET and
POST /v1/conversations/{id}/items; GET and DELETE /v1/conversations/{id}/items/{item_id}."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody

from api.auth import tenant_of
from api.conversations.parsing import check_include, check_metadata, to_stored
from api.conversations.protocol import (
    ConversationCreate,
    ConversationDeleted,
    ConversationItemList,
    ConversationObject,
    ConversationUpdate,
    ItemsCreate,
)
from api.conversations.rendering import item_list
from api.openapi import answer, errors
from api.responses.storing import listed, retention_days
from serving.errors import InvalidRequest, NotFound
from storage.conversations import Appended, ConversationStore, conversation_object
from tenancy.directory import Principal

WHAT = "conversations"


def _owner(conversations: ConversationStore | None, principal: Principal) -> tuple[ConversationStore, str]:
    if conversations is None:
        raise NotFound("this server keeps no conversations", param="conversation_id")
    tenant = tenant_of(principal, WHAT)
    if principal.quota is not None and not principal.quota.store_responses:
        raise InvalidRequest(
            "this tenant keeps no conversations (its `store_responses` setting is off)", code="storage_disabled"
        )
    return conversations, tenant


@post(
    "/v1/conversations",
    status_code=200,
    responses={**answer(ConversationObject, "The new conversation."), **errors(400, 401, 404, 429)},
)
async def create_conversation(
    data: JSONBody[ConversationCreate],
    principal: NamedDependency[Principal],
    conversations: NamedDependency[ConversationStore | None],
) -> dict[str, Any]:
    store, tenant = _owner(conversations, principal)
    metadata = check_metadata(data.metadata)
    first = to_stored(data.items or []) if data.items else Appended([], {})
    row = await asyncio.to_thread(store.create, tenant, metadata, first, retention_days=retention_days(principal))
    return conversation_object(row)


@get(
    "/v1/conversations/{conversation_id:str}",
    responses={**answer(ConversationObject, "The conversation."), **errors(400, 401, 404, 429)},
)
async def retrieve_conversation(
    conversation_id: FromPath[str],
    principal: NamedDependency[Principal],
    conversations: NamedDependency[ConversationStore | None],
) -> dict[str, Any]:
    store, tenant = _owner(conversations, principal)
    return conversation_object(await asyncio.to_thread(store.get, tenant, conversation_id))


@post(
    "/v1/conversations/{conversation_id:str}",
    status_code=200,
    responses={**answer(ConversationObject, "The conversation, its metadata replaced."), **errors(400, 401, 404, 429)},
)
async def update_conversation(
    conversation_id: FromPath[str],
    data: JSONBody[ConversationUpdate],
    principal: NamedDependency[Principal],
    conversations: NamedDependency[ConversationStore | None],
) -> dict[str, Any]:
    store, tenant = _owner(conversations, principal)
    metadata = check_metadata(data.metadata)
    return conversation_object(await asyncio.to_thread(store.update, tenant, conversation_id, metadata))


@delete(
    "/v1/conversations/{conversation_id:str}",
    status_code=200,
    responses={
        **answer(ConversationDeleted, "The conversation, its items and the media nothing else uses are gone."),
        **errors(400, 401, 404, 429),
    },
)
async def delete_conversation(
    conversation_id: FromPath[str],
    principal: NamedDependency[Principal],
    conversations: NamedDependency[ConversationStore | None],
) -> dict[str, Any]:
    store, tenant = _owner(conversations, principal)
    await asyncio.to_thread(store.delete, tenant, conversation_id)
    return ConversationDeleted(id=conversation_id).model_dump()


@get(
    "/v1/conversations/{conversation_id:str}/items",
    responses={**answer(ConversationItemList, "One page of the conversation's items."), **errors(400, 401, 404, 429)},
)
async def list_conversation_items(
    conversation_id: FromPath[str],
    principal: NamedDependency[Principal],
    conversations: NamedDependency[ConversationStore | None],
    after: FromQuery[str | None] = None,
    limit: FromQuery[int] = 20,
    order: FromQuery[str] = "desc",
    include: FromQuery[list[str] | None] = None,
) -> dict[str, Any]:
    store, tenant = _owner(conversations, principal)
    check_include(include)
    page = await asyncio.to_thread(store.items, tenant, conversation_id, after=after, limit=limit, order=order)
    return item_list(store.blobs, page)


@post(
    "/v1/conversations/{conversation_id:str}/items",
    status_code=200,
    responses={
        **answer(ConversationItemList, "The items added, in order, with their ids."),
        **errors(400, 401, 404, 429),
    },
)
async def create_conversation_items(
    conversation_id: FromPath[str],
    data: JSONBody[ItemsCreate],
    principal: NamedDependency[Principal],
    conversations: NamedDependency[ConversationStore | None],
    include: FromQuery[list[str] | None] = None,
) -> dict[str, Any]:
    store, tenant = _owner(conversations, principal)
    check_include(include)
    batch = to_stored(data.items)
    added = await asyncio.to_thread(
        store.append, tenant, conversation_id, batch, retention_days=retention_days(principal)
    )
    data_out = listed(store.blobs, added)
    return {
        "object": "list",
        "data": data_out,
        "first_id": data_out[0]["id"],
        "last_id": data_out[-1]["id"],
        "has_more": False,
    }


@get(
    "/v1/conversations/{conversation_id:str}/items/{item_id:str}",
    responses={**answer(dict[str, Any], "The item."), **errors(400, 401, 404, 429)},
)
async def retrieve_conversation_item(
    conversation_id: FromPath[str],
    item_id: FromPath[str],
    principal: NamedDependency[Principal],
    conversations: NamedDependency[ConversationStore | None],
    include: FromQuery[list[str] | None] = None,
) -> dict[str, Any]:
    store, tenant = _owner(conversations, principal)
    check_include(include)
    item = await asyncio.to_thread(store.item, tenant, conversation_id, item_id)
    return listed(store.blobs, [item])[0]


@delete(
    "/v1/conversations/{conversation_id:str}/items/{item_id:str}",
    status_code=200,
    responses={**answer(ConversationObject, "The conversation, without the item."), **errors(400, 401, 404, 429)},
)
async def delete_conversation_item(
    conversation_id: FromPath[str],
    item_id: FromPath[str],
    principal: NamedDependency[Principal],
    conversations: NamedDependency[ConversationStore | None],
) -> dict[str, Any]:
    store, tenant = _owner(conversations, principal)
    await asyncio.to_thread(store.delete_item, tenant, conversation_id, item_id)
    return conversation_object(await asyncio.to_thread(store.get, tenant, conversation_id))


CONVERSATION_ROUTES = [
    create_conversation,
    retrieve_conversation,
    update_conversation,
    delete_conversation,
    list_conversation_items,
    create_conversation_items,
    retrieve_conversation_item,
    delete_conversation_item,
]
