"""A stored conversation across gateway replicas: each turn of a `previous_response_id` chain on another gateway
of the fleet, the first turn's image an embedding-cache hit in every later turn, and the chain read and continued
by a gateway process started after it was stored."""

from __future__ import annotations

from bench.common import png_data_url
from tests.conftest import API_KEY
from tests.openai_wire import openai_client

TURNS = ("What is in this picture?", "And what colour is it?", "Describe it in one word.")


def _image_turn() -> list[dict]:
    parts = [{"type": "input_image", "image_url": png_data_url(5151)}, {"type": "input_text", "text": TURNS[0]}]
    return [{"role": "user", "content": parts}]


def _ask(client, **kw):
    return client.responses.create(model="small", max_output_tokens=4, temperature=0, **kw)


def test_a_conversation_moves_between_gateways_and_outlives_them(gateway, gateway_b, another_gateway):
    a, b = (openai_client(g.v1, API_KEY, timeout=120) for g in (gateway, gateway_b))
    first = _ask(a, input=_image_turn())
    second = _ask(b, input=TURNS[1], previous_response_id=first.id)
    third = _ask(a, input=TURNS[2], previous_response_id=second.id)
    for later in (second, third):
        details = later.usage.input_tokens_details.model_dump()
        assert details["image_tokens"] > 0
        assert details["cached_image_tokens"] == details["image_tokens"]

    whole = [
        *_image_turn(),
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": TURNS[1]},
        {"role": "assistant", "content": second.output_text},
        {"role": "user", "content": TURNS[2]},
    ]
    assert third.usage.input_tokens == _ask(b, input=whole, store=False).usage.input_tokens

    # a gateway process that did not exist when the chain was stored reads it and continues it
    for late in another_gateway():
        c = openai_client(late.v1, API_KEY, timeout=120)
        assert c.responses.retrieve(third.id).output_text == third.output_text
        fourth = _ask(c, input="Thank you.", previous_response_id=third.id)
        assert fourth.usage.input_tokens > third.usage.input_tokens
        c.responses.delete(first.id)
    assert [r.id for r in (b.responses.retrieve(second.id),)] == [second.id]
