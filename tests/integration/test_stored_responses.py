"""Stored responses on the live server with the official SDK: stored by default, retrieved, their input items
listed, deleted, invisible to other tenants, continued with `previous_response_id` at the cost of the whole
conversation, and a tenant that stores nothing."""

from __future__ import annotations

import base64
import time

import httpx
import openai
import pytest

from tests import media
from tests.admin import new_tenant
from tests.openai_wire import openai_client

QUESTION = "What is in this picture?"


def _first_turn() -> list[dict]:
    parts = [
        {"type": "input_image", "image_url": media.png_data_url(7), "detail": "auto"},
        {"type": "input_text", "text": QUESTION},
    ]
    return [{"role": "user", "content": parts}]


def _ask(client, **kw):
    kw.setdefault("max_output_tokens", 6)
    kw.setdefault("temperature", 0)
    return client.responses.create(model="small", **kw)


def test_a_response_is_stored_retrieved_listed_and_deleted(client):
    made = _ask(client, input=_first_turn())
    assert made.store is True
    got = client.responses.retrieve(made.id)
    assert (got.id, got.output_text, got.usage.input_tokens) == (made.id, made.output_text, made.usage.input_tokens)
    assert got.model_dump()["output"] == made.model_dump()["output"]

    items = client.responses.input_items.list(made.id).model_dump(exclude_none=True)
    assert items["has_more"] is False
    (item,) = items["data"]
    assert item["id"].startswith("msg_")
    assert item["role"] == "user"
    image, text = item["content"]
    assert text == {"type": "input_text", "text": QUESTION}
    sent = _first_turn()[0]["content"][0]["image_url"]
    assert base64.b64decode(image["image_url"].split(",", 1)[1]) == base64.b64decode(sent.split(",", 1)[1])
    assert "media" not in image

    deleted = client.responses.delete(made.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(made.id)


def test_a_streamed_response_is_stored_before_it_completes(client):
    events = list(_ask(client, input="Say hello.", stream=True))
    done = events[-1].response
    assert done.store is True
    assert client.responses.retrieve(done.id).output_text == done.output_text


def test_another_tenants_response_is_not_found(server, client):
    made = _ask(client, input="A secret of tenant one.")
    other = openai_client(server.v1, new_tenant(server, "other"), timeout=120)
    for call in (
        lambda: other.responses.retrieve(made.id),
        lambda: other.responses.delete(made.id),
        lambda: other.responses.input_items.list(made.id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    with pytest.raises(openai.NotFoundError) as exc:
        _ask(other, input="Go on.", previous_response_id=made.id)
    assert exc.value.body["param"] == "previous_response_id"
    assert client.responses.retrieve(made.id).id == made.id  # still there for its own tenant


def test_a_continued_conversation_costs_what_the_whole_conversation_does(client):
    first = _ask(client, input=_first_turn())
    second = _ask(client, input="And what colour is it?", previous_response_id=first.id)
    third = _ask(client, input="Describe it in one word.", previous_response_id=second.id)
    assert (second.previous_response_id, third.previous_response_id) == (first.id, second.id)
    # the image of turn one is an embedding-cache hit in turns two and three: never fetched or encoded again
    for later in (second, third):
        details = later.usage.input_tokens_details.model_dump()
        assert details["image_tokens"] > 0
        assert details["cached_image_tokens"] == details["image_tokens"]

    whole = [
        *_first_turn(),
        *[{"role": "assistant", "content": first.output_text}],
        {"role": "user", "content": "And what colour is it?"},
        {"role": "assistant", "content": second.output_text},
        {"role": "user", "content": "Describe it in one word."},
    ]
    stateless = _ask(client, input=whole, store=False)
    assert third.usage.input_tokens == stateless.usage.input_tokens
    assert third.output_text == stateless.output_text  # greedy: the same prompt gives the same answer

    listed = client.responses.input_items.list(third.id).model_dump(exclude_none=True)["data"]
    assert [i["content"] for i in listed] == [[{"type": "input_text", "text": "Describe it in one word."}]]


def test_instructions_are_not_carried_over(client):
    first = _ask(client, input="Hi.", instructions="Answer in French.")
    second = _ask(client, input="Hi again.", previous_response_id=first.id)
    alone = _ask(client, input=[{"role": "user", "content": "Hi."}, {"role": "assistant", "content": first.output_text},
                                {"role": "user", "content": "Hi again."}], store=False)  # fmt: skip
    assert second.instructions is None
    assert second.usage.input_tokens == alone.usage.input_tokens


def test_a_tenant_that_stores_nothing(server):
    key = new_tenant(server, "nostore", store_responses=False)
    client = openai_client(server.v1, key, timeout=120)
    made = _ask(client, input="Hello.")
    assert made.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)
    with pytest.raises(openai.BadRequestError) as exc:
        _ask(client, input="Hello.", store=True)
    assert exc.value.body["param"] == "store"
    assert "store_responses" in exc.value.body["message"]


def test_store_false_keeps_nothing(client):
    made = _ask(client, input="Forget me.", store=False)
    assert made.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)


def test_an_unknown_previous_response_is_a_404_naming_it(server):
    resp = httpx.post(
        f"{server.v1}/responses",
        headers={"authorization": f"Bearer {new_tenant(server, 'prev')}"},
        json={"model": "small", "input": "Go on.", "previous_response_id": "resp_0123", "max_output_tokens": 2},
        timeout=60,
    )
    assert resp.status_code == 404, resp.text
    assert resp.json()["error"]["param"] == "previous_response_id"


def _until_done(client, response_id: str, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while True:
        got = client.responses.retrieve(response_id)
        if got.status not in ("queued", "in_progress"):
            return got
        assert time.monotonic() < deadline, f"{response_id} still {got.status}"
        time.sleep(0.2)


def test_a_background_response_is_queued_then_answered(client):
    queued = _ask(client, input=_first_turn(), background=True)
    assert (queued.status, queued.background, queued.output) == ("queued", True, [])
    done = _until_done(client, queued.id)
    assert (done.id, done.background) == (queued.id, True)
    assert done.status in ("completed", "incomplete")  # six tokens may cut the answer short
    assert done.output_text
    assert done.usage.input_tokens_details.model_dump()["image_tokens"] > 0
    # it is a stored response like any other: it can be continued
    assert _ask(client, input="Go on.", previous_response_id=done.id).previous_response_id == done.id


def test_a_background_response_cancelled_stays_cancelled(client):
    queued = _ask(client, input="Count from one to a hundred.", background=True, max_output_tokens=200)
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    time.sleep(2)  # a run already under way ends without overwriting the cancellation
    assert client.responses.retrieve(queued.id).status == "cancelled"
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.cancel(_ask(client, input="Hi.").id)  # only background responses can be cancelled
    assert exc.value.body["param"] == "response_id"
