"""OpenAI's conversation structs: the create and update requests, items to add, and the objects the API answers
with. Items are the Responses API's input items (`api.responses.protocol.InputItem`), checked as a response would
read them (`api.conversations.parsing`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.responses.protocol import InputItem

MAX_ITEMS_PER_CALL = 20  # as OpenAI: a create or an items.create adds at most 20 items
Metadata = dict[str, str]


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class ConversationCreate(_Body):
    items: list[InputItem] | None = Field(default=None, max_length=MAX_ITEMS_PER_CALL)
    metadata: Metadata | None = Field(default=None, max_length=16)


class ConversationUpdate(_Body):
    metadata: Metadata = Field(max_length=16)


class ItemsCreate(_Body):
    items: list[InputItem] = Field(min_length=1, max_length=MAX_ITEMS_PER_CALL)


class ConversationObject(BaseModel):
    id: str
    object: Literal["conversation"] = "conversation"
    created_at: int
    metadata: Metadata


class ConversationDeleted(BaseModel):
    id: str
    object: Literal["conversation.deleted"] = "conversation.deleted"
    deleted: bool = True


class ConversationItemList(BaseModel):
    object: Literal["list"] = "list"
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
