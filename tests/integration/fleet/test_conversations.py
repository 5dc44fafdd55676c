"""Named conversations through the official SDKs, on the fleet's two gateways over PostgreSQL: created with items,
replayed into responses (the image an embedding-cache hit, the tokens those of the whole thread sent at once),
listed and pruned, private to their tenant, and alternated between gateways with concurrent appends losing
nothing. The Agents SDK's `OpenAIConversationsSession` is tests/integration/test_agents_sdk.py's."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from bench.common import png_data_url
from tests.admin import new_tenant
from tests.conftest import API_KEY
from tests.openai_wire import openai_client

ASK = {"model": "small", "max_output_tokens": 4, "temperature": 0}
QUESTION = "What is in this picture?"


def _texts(items) -> list[str]:
    """Each item's text parts, joined ('' for an item with none)."""
    return ["".join(getattr(p, "text", None) or "" for p in item.content) for item in items]


def _image_message(seed: int) -> dict:
    parts = [{"type": "input_image", "image_url": png_data_url(seed)}, {"type": "input_text", "text": QUESTION}]
    return {"type": "message", "role": "user", "content": parts}


def test_a_conversation_replays_its_items_into_each_response(gateway, gateway_b):
    a, b = (openai_client(g.v1, API_KEY, timeout=120) for g in (gateway, gateway_b))
    conversation = a.conversations.create(
        items=[{"type": "message", "role": "system", "content": "Answer briefly."}], metadata={"app": "tests"}
    )
    assert conversation.id.startswith("conv_")
    assert conversation.metadata == {"app": "tests"}
    added = b.conversations.items.create(conversation.id, items=[_image_message(7070)])
    assert [item.type for item in added.data] == ["message"]

    first = a.responses.create(input="Describe it.", conversation=conversation.id, **ASK)
    second = b.responses.create(input="And its colour?", conversation={"id": conversation.id}, **ASK)
    assert first.conversation.id == second.conversation.id == conversation.id
    details = second.usage.input_tokens_details.model_dump()
    assert details["image_tokens"] > 0
    assert details["cached_image_tokens"] == details["image_tokens"]

    items = list(a.conversations.items.list(conversation.id, order="asc"))
    assert [(i.type, i.role) for i in items] == [
        ("message", "system"),
        ("message", "user"),
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
        ("message", "assistant"),
    ]
    texts = _texts(items)
    assert texts[:3] == ["Answer briefly.", QUESTION, "Describe it."]
    assert texts[3] == first.output_text
    assert texts[4] == "And its colour?"
    assert texts[5] == second.output_text
    assert items[1].content[0].image_url == png_data_url(7070)  # the stored image, back as it was sent
    assert items[3].id == first.output[0].id  # the response's output item, appended as it was returned

    whole = [
        {"role": "system", "content": "Answer briefly."},
        _image_message(7070),
        {"role": "user", "content": "Describe it."},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And its colour?"},
    ]
    assert second.usage.input_tokens == b.responses.create(input=whole, store=False, **ASK).usage.input_tokens

    newest = a.conversations.items.list(conversation.id, limit=2)  # desc by default
    assert [i.id for i in newest.data] == [items[5].id, items[4].id]
    assert newest.has_more
    assert b.conversations.items.retrieve(items[2].id, conversation_id=conversation.id).id == items[2].id
    after_delete = a.conversations.items.delete(items[2].id, conversation_id=conversation.id)
    assert after_delete.id == conversation.id
    left = [i.id for i in b.conversations.items.list(conversation.id, order="asc")]
    assert left == [i.id for i in items if i.id != items[2].id]

    updated = b.conversations.update(conversation.id, metadata={"app": "tests", "turns": "2"})
    assert a.conversations.retrieve(conversation.id).metadata == updated.metadata == {"app": "tests", "turns": "2"}
    assert b.conversations.delete(conversation.id).deleted
    with pytest.raises(openai.NotFoundError):
        a.conversations.retrieve(conversation.id)


def test_a_conversation_is_its_tenants_and_one_history_at_a_time(gateway):
    mine = openai_client(gateway.v1, API_KEY, timeout=60)
    theirs = openai_client(gateway.v1, new_tenant(gateway, "conv"), timeout=60)
    conversation = mine.conversations.create(items=[{"role": "user", "content": "hello"}])
    for call in (
        lambda: theirs.conversations.retrieve(conversation.id),
        lambda: theirs.conversations.items.list(conversation.id),
        lambda: theirs.conversations.items.create(conversation.id, items=[{"role": "user", "content": "x"}]),
        lambda: theirs.conversations.delete(conversation.id),
        lambda: theirs.responses.create(input="hi", conversation=conversation.id, **ASK),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    earlier = mine.responses.create(input="hi", **ASK)
    with pytest.raises(openai.BadRequestError) as both:
        mine.responses.create(input="hi", conversation=conversation.id, previous_response_id=earlier.id, **ASK)
    assert both.value.body["param"] == "conversation"
    assert "previous_response_id" in both.value.body["message"]
    with pytest.raises(openai.BadRequestError) as bad_item:
        mine.conversations.items.create(conversation.id, items=[{"type": "reasoning", "summary": []}])
    assert bad_item.value.body["param"] == "items[0].type"
    assert [i.role for i in mine.conversations.items.list(conversation.id)] == ["user"]  # nothing half-added


def test_turns_alternate_between_gateways_and_concurrent_appends_lose_nothing(gateway, gateway_b):
    clients = [openai_client(g.v1, API_KEY, timeout=180) for g in (gateway, gateway_b)]
    conversation = clients[0].conversations.create()
    turns = 6

    def turn(k: int):
        return clients[k % 2].responses.create(input=f"turn {k}", conversation=conversation.id, **ASK)

    with ThreadPoolExecutor(max_workers=turns) as pool:
        answered = list(pool.map(turn, range(turns)))
    items = list(clients[1].conversations.items.list(conversation.id, order="asc", limit=100))
    assert len(items) == 2 * turns
    pairs = [(_texts(items[i : i + 1])[0], items[i + 1].id) for i in range(0, len(items), 2)]
    assert sorted(pairs) == sorted((f"turn {k}", r.output[0].id) for k, r in enumerate(answered))
    assert [i.role for i in items] == ["user", "assistant"] * turns  # each response's items land together

    later = clients[1].responses.create(input="and now?", conversation=conversation.id, **ASK)
    alone = clients[0].responses.create(input="and now?", store=False, **ASK)
    assert later.usage.input_tokens > alone.usage.input_tokens  # the twelve items were replayed ahead of it
