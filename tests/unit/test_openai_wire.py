"""The checking transport: it passes bodies through unchanged and as they arrive, and logs what breaks the schemas."""

from __future__ import annotations

import gzip
import json

import httpx
import httpx2
from openai import OpenAI

from tests.openai_wire import CheckingTransport, CheckingTransport2, ViolationLog
from tests.unit.test_openai_schema import COMPLETION_BODY, ERROR_BODY, FIRST_CHUNK, LAST_CHUNK, NEXT_CHUNK

URL = "http://tessera.test/v1/chat/completions"
SSE = {"content-type": "text/event-stream"}


def _sse(*events) -> list[bytes]:
    return [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events]


def _client(handler, log: ViolationLog) -> httpx.Client:
    return httpx.Client(transport=CheckingTransport(httpx.MockTransport(handler), log))


def _answer(status=200, headers=None, content=b""):
    def handler(request: httpx.Request) -> httpx.Response:
        # an iterator, as from a network: bytes would make httpx read the body before the transport could tee it
        body = iter([content[:10], content[10:]])
        return httpx.Response(status, headers=headers or {"content-type": "application/json"}, content=body)

    return handler


def _post(handler, url=URL) -> tuple[httpx.Response, list[str]]:
    log = ViolationLog()
    with _client(handler, log) as client:
        resp = client.post(url, json={})
    return resp, log.drain()


def _without_refusal() -> dict:
    body = json.loads(json.dumps(COMPLETION_BODY))
    del body["choices"][0]["message"]["refusal"]
    return body


def test_a_conforming_completion_and_error_pass():
    assert _post(_answer(content=json.dumps(COMPLETION_BODY).encode()))[1] == []
    assert _post(_answer(400, content=json.dumps(ERROR_BODY).encode()))[1] == []


def test_a_completion_without_refusal_is_logged_and_still_delivered():
    body = json.dumps(_without_refusal()).encode()
    resp, found = _post(_answer(content=body, headers={"content-type": "application/json"}))
    assert resp.content == body
    assert len(found) == 1
    assert "POST http://tessera.test/v1/chat/completions -> 200" in found[0]
    assert "'refusal' is a required property" in found[0]


def test_an_error_status_must_carry_the_error_shape():
    _, found = _post(_answer(404, headers={"content-type": "application/json"}, content=b'{"detail": "Not Found"}'))
    assert len(found) == 1
    assert "the error body is not a valid ErrorResponse" in found[0]


def test_a_body_that_is_not_json_is_logged():
    _, found = _post(_answer(500, headers={"content-type": "text/plain"}, content=b"Internal Server Error"))
    assert len(found) == 1
    assert found[0].endswith("-> 500: content-type 'text/plain': OpenAI answers with JSON or an event stream")


def test_other_paths_are_not_checked():
    resp, found = _post(_answer(404, content=b"nothing"), url="http://tessera.test/v1/models")
    assert (resp.status_code, found) == (404, [])


def test_a_gzipped_body_is_checked_after_inflating():
    body = gzip.compress(json.dumps(_without_refusal()).encode())
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    resp, found = _post(_answer(headers=headers, content=body))
    assert resp.json()["id"] == COMPLETION_BODY["id"]
    assert len(found) == 1


def test_a_body_in_an_encoding_it_cannot_read_is_reported_once():
    headers = {"content-type": "application/json", "content-encoding": "br"}
    _, found = _post(_answer(headers=headers, content=b"\x1b\x00"))
    assert len(found) == 1
    assert found[0].endswith("content-encoding 'br': the body cannot be checked")


def test_a_stream_is_checked_event_by_event_without_being_held_back():
    role_null = json.loads(json.dumps(NEXT_CHUNK))
    role_null["choices"][0]["delta"]["role"] = None
    events = _sse(FIRST_CHUNK, role_null, role_null, LAST_CHUNK, "[DONE]")
    produced: list[int] = []

    def body():
        for i, event in enumerate(events):
            produced.append(i)
            # split an event across reads, as a network does
            yield event[:7]
            yield event[7:]

    log = ViolationLog()
    with (
        _client(lambda request: httpx.Response(200, headers=SSE, content=body()), log) as client,
        client.stream("POST", URL, json={}) as resp,
    ):
        received = b""
        produced_when_first_arrived = None
        for piece in resp.iter_raw():
            received += piece
            if received == events[0]:
                produced_when_first_arrived = list(produced)
    assert produced_when_first_arrived == [0], "the first event must reach the client before the second is produced"
    assert received == b"".join(events)
    found = log.drain()
    assert len(found) == 1, found  # the same problem in two chunks is reported once
    assert "event 2 is not a valid CreateChatCompletionStreamResponse: $.choices[0].delta.role: None" in found[0]


def test_a_stream_must_end_with_done_and_nothing_after_it():
    _, found = _post(_answer(headers=SSE, content=b"".join(_sse(FIRST_CHUNK, LAST_CHUNK))))
    assert [f.split(": ", 1)[1] for f in found] == ["the stream ended without `data: [DONE]`"]
    _, found = _post(_answer(headers=SSE, content=b"".join(_sse(FIRST_CHUNK, "[DONE]", LAST_CHUNK))))
    assert len(found) == 1
    assert "event 3 came after `data: [DONE]`" in found[0]


def test_an_error_event_is_checked_against_the_error_schema():
    good = _sse(FIRST_CHUNK, ERROR_BODY, "[DONE]")
    assert _post(_answer(headers=SSE, content=b"".join(good)))[1] == []
    bad = _sse(FIRST_CHUNK, {"error": {"message": "engine died"}}, "[DONE]")
    _, found = _post(_answer(headers=SSE, content=b"".join(bad)))
    assert len(found) == 1
    assert "'type' is a required property; 'param' is a required property; 'code' is a" in found[0]
    assert all("event 2 (an error) is not a valid ErrorResponse" in f for f in found)


def test_a_stream_left_early_is_not_blamed_for_its_end():
    log = ViolationLog()
    with (
        _client(_answer(headers=SSE, content=b"".join(_sse(FIRST_CHUNK, NEXT_CHUNK, "[DONE]"))), log) as client,
        client.stream("POST", URL, json={}) as resp,
    ):
        next(resp.iter_lines())
    assert log.drain() == []


def test_the_openai_sdk_gets_its_answer_and_the_violation_is_logged():
    body = json.dumps(_without_refusal()).encode()

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "application/json"}, content=iter([body]))

    log = ViolationLog()
    http_client = httpx2.Client(transport=CheckingTransport2(httpx2.MockTransport(handler), log))
    client = OpenAI(base_url="http://tessera.test/v1", api_key="sk-x", max_retries=0, http_client=http_client)
    resp = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert resp.choices[0].message.content == COMPLETION_BODY["choices"][0]["message"]["content"]
    found = log.drain()
    assert len(found) == 1
    assert "'refusal' is a required property" in found[0]
