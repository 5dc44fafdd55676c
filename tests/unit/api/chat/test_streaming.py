"""The SSE path with a stub engine: chunk order, usage chunk, errors after the stream started, and a client
that goes away mid-stream."""

import asyncio
import json

import pytest

from api.chat.parsing import generation_request, parse_chat_request
from api.chat.rendering import complete
from api.chat.streaming import stream
from serving.errors import EngineUnavailable
from tests.stubs import RecordingCaller, StubEngine, harness


def _req(**body):
    return parse_chat_request(
        json.dumps({"model": "stub", "messages": [{"role": "user", "content": "hi"}], **body}).encode()
    )


async def _stream(h, caller, **body):
    req = _req(stream=True, **body)
    completion = await h.service.start(generation_request(req, 8), caller)
    return await stream(req, completion)


async def _collect(engine, **body):
    h = harness(engine)
    caller = RecordingCaller()
    response = await _stream(h, caller, **body)
    events = [e async for e in response.iterator]
    await asyncio.sleep(0)
    await h.tasks.drain()
    return events, h, response


def _payloads(events):
    return [e.removeprefix("data: ").strip() for e in events]


def test_stream_chunks_and_usage():
    events, h, response = asyncio.run(_collect(StubEngine(), stream_options={"include_usage": True}))
    payloads = _payloads(events)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:-1])
    assert "".join(c["choices"][0]["delta"]["content"] or "" for c in chunks[1:-1]) == "Hello!"
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == []
    usage = chunks[-1]["usage"]
    assert usage["prompt_tokens_details"] == {
        "cached_tokens": 0,
        "text_tokens": 2,
        "image_tokens": 2,
        "audio_tokens": 0,
        "cached_image_tokens": 0,
        "cached_audio_tokens": 0,
    }
    assert usage["completion_tokens"] == 3
    assert [r.status for r in h.records] == ["completed"]
    assert response.headers["x-tessera-model"] == "stub"
    assert response.headers["x-ratelimit-remaining-requests"] == "1"


def test_error_after_start_becomes_an_event_then_done():
    engine = StubEngine(fail_at=2)
    events, h, _ = asyncio.run(_collect(engine))
    payloads = _payloads(events)
    assert payloads[-1] == "[DONE]"
    error = json.loads(payloads[-2])
    assert error["error"]["code"] == "engine_unavailable"
    assert error["error"]["type"] == "server_error"
    assert [r.status for r in h.records] == ["failed"]
    assert engine.aborted == [h.records[0].request_id]


def test_error_before_first_token_is_raised_for_an_http_status():
    h = harness(StubEngine(fail_at=0))
    caller = RecordingCaller()

    async def run():
        with pytest.raises(EngineUnavailable):
            await _stream(h, caller)
        await asyncio.sleep(0)
        await h.tasks.drain()

    asyncio.run(run())
    assert [r.status for r in h.records] == ["failed"]
    assert caller.settled == [0]
    assert h.pool.admission.in_use == 0


def test_client_gone_mid_stream_cancels_and_releases():
    engine = StubEngine(hang_at=1)
    h = harness(engine)
    caller = RecordingCaller()

    async def run():
        response = await _stream(h, caller)
        events = response.iterator.__aiter__()
        await anext(events)  # the role chunk
        await anext(events)  # "Hel"
        pending = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.05)
        pending.cancel()  # the server stops the response as the client disconnects
        with pytest.raises(asyncio.CancelledError):
            await pending
        await events.aclose()
        await asyncio.sleep(0)
        await h.tasks.drain()

    asyncio.run(run())
    assert [r.status for r in h.records] == ["cancelled"]
    assert engine.aborted == [h.records[0].request_id]
    assert h.pool.admission.in_use == 0
    assert caller.settled == [h.records[0].usage.total]


def test_non_streaming_body_carries_refusal_and_usage():
    h = harness()

    async def run():
        req = _req()
        completion = await h.service.start(generation_request(req, 8), RecordingCaller())
        return await complete(req, completion)

    response = asyncio.run(run())
    body = response.content
    assert body["choices"][0]["message"]["content"] == "Hello!"
    assert body["choices"][0]["message"]["refusal"] is None
    assert body["usage"]["total_tokens"] == 7
    assert [r.status for r in h.records] == ["completed"]


def _two_choices():
    from serving.engines.base import EngineDelta, TokenLogprob
    from tests.stubs import PROMPT

    lp = (TokenLogprob("a", -0.5, (("a", -0.5), ("b", -1.5))),)
    return [
        EngineDelta("A", [1], PROMPT, 0, None, index=0, logprobs=lp),
        EngineDelta("B", [2], PROMPT, 0, None, index=1, logprobs=lp),
        EngineDelta("a", [3], PROMPT, 0, "stop", index=0, logprobs=lp),
        EngineDelta("bb", [4, 5], PROMPT, 0, "length", index=1, logprobs=lp + lp),
    ]


def test_n_choices_stream_separately_with_logprobs_and_count_in_usage():
    body = {"n": 2, "logprobs": True, "top_logprobs": 2, "stream_options": {"include_usage": True}}
    events, h, _ = asyncio.run(_collect(StubEngine(_two_choices()), **body))
    chunks = [json.loads(p) for p in _payloads(events)[:-1]]
    by_index: dict[int, list] = {0: [], 1: []}
    for c in chunks[:-1]:
        by_index[c["choices"][0]["index"]].append(c["choices"][0])
    for index, text, reason in ((0, "Aa", "stop"), (1, "Bbb", "length")):
        choice = by_index[index]
        assert choice[0]["delta"] == {"role": "assistant", "content": ""}
        assert "".join(c["delta"].get("content") or "" for c in choice) == text
        assert choice[-1]["finish_reason"] == reason
        tokens = [t for c in choice if c["logprobs"] for t in c["logprobs"]["content"]]
        assert tokens[0]["top_logprobs"][1] == {"token": "b", "logprob": -1.5, "bytes": [98]}
    assert chunks[-1]["usage"]["completion_tokens"] == 5  # every choice's tokens
    assert h.records[0].usage.completion == 5


def test_non_streaming_n_choices_and_named_tool_call():
    from serving.engines.base import EngineDelta
    from tests.stubs import PROMPT

    h = harness(StubEngine(_two_choices()))
    tool_engine = StubEngine([EngineDelta('{"city": "Paris"}', [7, 8], PROMPT, 0, "stop")])
    h_tool = harness(tool_engine)

    async def run(harness_, **body):
        req = _req(**body)
        completion = await harness_.service.start(generation_request(req, 8), RecordingCaller())
        return (await complete(req, completion)).content

    body = asyncio.run(run(h, n=2))
    assert [(c["index"], c["message"]["content"], c["finish_reason"]) for c in body["choices"]] == [
        (0, "Aa", "stop"),
        (1, "Bbb", "length"),
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    named = {"type": "function", "function": {"name": "get_weather"}}
    called = asyncio.run(run(h_tool, tools=tools, tool_choice=named))
    message = called["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert called["choices"][0]["finish_reason"] == "stop"  # a named function stops, as OpenAI's does
    assert tool_engine.requests[0].params.structured.json_schema == {"type": "object"}


# -- the usage journal: `[DONE]` and the body go out only once the usage is on record -----------------------------


@pytest.fixture
def journal(tmp_path):
    from billing.prices import PriceBook
    from tenancy.usage_log import UsageJournal
    from tests.dbs import migrated

    databases = migrated("sqlite", tmp_path)
    db = next(databases)
    yield UsageJournal(db, PriceBook(db), retry_delays_s=(0.01, 0.02))
    next(databases, None)


def _status(journal, request_id):
    from sqlmodel import Session

    from db.models import InferenceRequest

    with Session(journal._db) as s:
        row = s.get(InferenceRequest, request_id)
        return None if row is None else row.status


def _failing_settle(journal):
    calls = []

    def settle(record):
        calls.append(record.request_id)
        raise RuntimeError("database is locked")

    journal._close = settle
    return calls


async def _stream_with_id(h):
    req = _req(stream=True)
    completion = await h.service.start(generation_request(req, 8), RecordingCaller())
    return await stream(req, completion), completion.request_id


def test_done_is_sent_once_the_usage_row_is_settled(journal):
    h = harness(journal=journal)

    async def run():
        response, request_id = await _stream_with_id(h)
        seen = []
        async for event in response.iterator:
            seen.append((event, _status(journal, request_id)))
        return seen

    seen = asyncio.run(run())
    assert _payloads([seen[-1][0]]) == ["[DONE]"]
    assert seen[-1][1] == "completed"  # settled before `[DONE]` went out
    assert seen[0][1] == "running"  # opened before the first chunk


def test_a_stream_whose_usage_cannot_be_settled_ends_in_an_error_instead_of_done(journal):
    h = harness(journal=journal)
    calls = _failing_settle(journal)

    async def run():
        response, request_id = await _stream_with_id(h)
        return [e async for e in response.iterator], request_id

    events, request_id = asyncio.run(run())
    payloads = _payloads(events)
    assert "[DONE]" not in payloads
    error = json.loads(payloads[-1])["error"]
    assert (error["code"], error["type"]) == ("metering_unavailable", "server_error")
    assert "".join(json.loads(p)["choices"][0]["delta"].get("content") or "" for p in payloads[:-1]) == "Hello!"
    assert len(calls) == 3  # the first try and two retries
    assert _status(journal, request_id) == "running"
    assert request_id in journal._unsettled  # kept, and settled by the heartbeat loop once the database is back
    del journal._close
    asyncio.run(journal.stop())
    assert _status(journal, request_id) == "completed"


def test_a_body_whose_usage_cannot_be_settled_is_a_503(journal):
    from api.errors import to_api_error
    from serving.errors import Unavailable

    h = harness(journal=journal)
    _failing_settle(journal)

    async def run():
        req = _req()
        completion = await h.service.start(generation_request(req, 8), RecordingCaller())
        with pytest.raises(Unavailable) as refused:
            await complete(req, completion)
        return refused.value, completion.request_id

    refused, request_id = asyncio.run(run())
    err = to_api_error(refused)
    assert (err.status_code, err.code) == (503, "metering_unavailable")
    assert "retry-after" in err.headers
    assert _status(journal, request_id) == "running"
