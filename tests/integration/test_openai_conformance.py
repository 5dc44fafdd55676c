"""Response shapes the other end-to-end tests do not reach, each checked against OpenAI's published schemas.

Every response here passes through tests/openai_wire.py, which fails the test on any schema violation; the
asserts below check what the schemas leave open but OpenAI's API does.
"""

from __future__ import annotations

import json

import pytest

from tests import openai_wire
from tests.conftest import API_KEY
from tests.openai_schema import CHUNK, COMPLETION, assert_valid

AUTH = {"authorization": f"Bearer {API_KEY}"}


def _body(**overrides):
    return {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, **overrides}


def _events(server, body) -> list[dict]:
    with openai_wire.stream("POST", server.v1 + "/chat/completions", json=body, headers=AUTH, timeout=120) as resp:
        assert resp.status_code == 200, resp.read()
        data = [line.removeprefix("data: ") for line in resp.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def test_stream_with_extensions_and_usage(server):
    chunks = _events(server, _body(stream=True, stream_options={"include_usage": True}, return_token_ids=True))
    for chunk in chunks:
        assert_valid(chunk, CHUNK)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert all("role" not in d for d in deltas[1:])  # OpenAI names the role once, and never sends it as null
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    token_ids = [t for c in chunks[:-1] for t in c["choices"][0].get("token_ids", [])]
    assert chunks[-1]["usage"]["completion_tokens"] == len(token_ids) > 0
    assert chunks[0]["prompt_token_ids"]
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1


def test_stream_without_usage_leaves_the_key_out(server):
    chunks = _events(server, _body(stream=True))
    assert chunks
    assert all("usage" not in c for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] in ("stop", "length")


def test_completion_with_extensions(server):
    resp = openai_wire.post(
        server.v1 + "/chat/completions", json=_body(return_token_ids=True), headers=AUTH, timeout=120
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert_valid(body, COMPLETION)
    assert body["choices"][0]["message"]["refusal"] is None
    assert len(body["choices"][0]["token_ids"]) == body["usage"]["completion_tokens"]


@pytest.mark.parametrize(
    ("overrides", "status"),
    [
        ({"model": "gpt-9", "stream": True}, 404),  # a streamed request that fails first gets JSON and a status
        ({"messages": [], "stream": True}, 400),
        ({"stream": True, "n": 17}, 400),
    ],
    ids=["unknown-model", "no-messages", "n-17"],
)
def test_errors_before_the_stream_starts_are_json(server, overrides, status):
    resp = openai_wire.post(server.v1 + "/chat/completions", json=_body(**overrides), headers=AUTH, timeout=120)
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")


def test_other_methods_and_media_types_get_the_error_shape(server):
    with openai_wire.http_client(timeout=30) as http:
        got = http.get(server.v1 + "/chat/completions", headers=AUTH)
    assert got.status_code in (404, 405), got.text
    form = openai_wire.post(server.v1 + "/chat/completions", data={"model": "small"}, headers=AUTH, timeout=30)
    assert form.status_code == 400, form.text
