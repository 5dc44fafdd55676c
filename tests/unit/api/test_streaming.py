"""The SSE path with a stub engine: chunk order, usage chunk, errors after the stream started, and a client
that goes away mid-stream."""

import asyncio
import json

import pytest

from api.parsing import generation_request, parse_chat_request
from api.streaming import complete, stream
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
