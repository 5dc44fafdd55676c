"""The Responses API's rendering on a stub engine: a completion becomes a `response` body and typed SSE events
that the openai SDK's models accept, named by the lease, with errors and unsettled usage ending them as errors."""

from __future__ import annotations

import asyncio
import json

import pytest
from openai.types.responses import Response as SdkResponse
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from api.responses.parsing import generation_request, parse_responses_request, to_conversation
from api.responses.rendering import complete, lease_id, response_id, stream
from serving.engines.base import EngineDelta
from tests.shapes import WEATHER_FUNCTION, responses_tool
from tests.stubs import PROMPT, RecordingCaller, StubEngine, harness

EVENTS = TypeAdapter(ResponseStreamEvent)
WEATHER = responses_tool(WEATHER_FUNCTION)


def test_response_ids_name_the_lease():
    assert response_id("chatcmpl-abc") == "resp_abc"
    assert lease_id("resp_abc") == "chatcmpl-abc"


async def _start(engine=None, **body):
    h = harness(engine)
    req = parse_responses_request(json.dumps({"model": "stub", "input": "hi", **body}).encode())
    conversation = to_conversation(req)
    completion = await h.service.start(generation_request(req, conversation, 8), RecordingCaller())
    return h, req, conversation, completion


def _body(engine=None, **body):
    async def run():
        h, req, _, completion = await _start(engine, **body)
        response = await complete(req, completion)
        await asyncio.sleep(0)
        await h.tasks.drain()
        return response, h, completion

    return asyncio.run(run())


def _events(engine=None, **body):
    async def run():
        h, req, conversation, completion = await _start(engine, stream=True, **body)
        response = await stream(req, completion, conversation.param)
        raw = [e async for e in response.iterator]
        await asyncio.sleep(0)
        await h.tasks.drain()
        return raw, h, response

    raw, h, response = asyncio.run(run())
    events = []
    for text in raw:
        kind, data = text.strip().split("\n")
        payload = json.loads(data.removeprefix("data: "))
        assert kind == f"event: {payload['type']}"
        EVENTS.validate_python(payload)
        events.append(payload)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events, h, response


def test_one_body_is_a_typed_response_with_usage_and_the_lease_id():
    response, h, completion = _body(metadata={"k": "v"}, max_output_tokens=3)
    body = response.content
    parsed = SdkResponse.model_validate(body)
    assert parsed.id == response_id(completion.request_id)
    assert response.headers["x-tessera-request-id"] == completion.request_id == h.records[0].request_id
    assert parsed.output_text == "Hello!"
    assert (parsed.status, parsed.incomplete_details.reason) == ("incomplete", "max_output_tokens")  # stub: length
    assert (parsed.metadata, parsed.max_output_tokens, parsed.store) == ({"k": "v"}, 3, False)
    usage = body["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (len(PROMPT), 3, len(PROMPT) + 3)
    assert usage["input_tokens_details"]["image_tokens"] == 2
    assert usage["output_tokens_details"] == {"reasoning_tokens": 0}


def test_stream_events_in_order_and_complete():
    replay = [EngineDelta("Hi", [1], PROMPT, 0, None), EngineDelta(" there", [2], PROMPT, 0, "stop")]
    events, h, response = _events(StubEngine(replay))
    assert response.media_type == "text/event-stream"
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[6]["text"] == "Hi there"
    final = SdkResponse.model_validate(events[-1]["response"])
    assert (final.status, final.output_text, final.usage.output_tokens) == ("completed", "Hi there", 2)
    assert h.records[0].status == "completed"


def test_a_named_function_streams_its_arguments():
    replay = [
        EngineDelta('{"city": ', [1], PROMPT, 0, None),
        EngineDelta('"Paris"}', [2], PROMPT, 0, "stop"),
    ]
    tool_choice = {"type": "function", "name": "get_weather"}
    events, _, _ = _events(StubEngine(replay), tools=[WEATHER], tool_choice=tool_choice)
    kinds = [e["type"] for e in events]
    assert kinds[2:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    call = events[-2]["item"]
    assert (call["type"], call["name"], json.loads(call["arguments"])) == (
        "function_call",
        "get_weather",
        {"city": "Paris"},
    )
    assert events[-1]["response"]["output"] == [call]


def test_required_calls_arrive_whole_in_one_body_and_in_the_stream():
    text = json.dumps(
        [
            {"name": "get_weather", "parameters": {"city": "Paris"}},
            {"name": "get_weather", "parameters": {"city": "Rome"}},
        ]
    )
    replay = [EngineDelta(text[:10], [1], PROMPT, 0, None), EngineDelta(text[10:], [2], PROMPT, 0, "stop")]
    response, _, _ = _body(StubEngine(list(replay)), tools=[WEATHER], tool_choice="required")
    output = SdkResponse.model_validate(response.content).output
    assert [(o.type, json.loads(o.arguments)["city"]) for o in output] == [
        ("function_call", "Paris"),
        ("function_call", "Rome"),
    ]
    events, _, _ = _events(StubEngine(list(replay)), tools=[WEATHER], tool_choice="required")
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [0, 1]
    assert [json.loads(d["arguments"])["city"] for d in done] == ["Paris", "Rome"]
    assert len({d["call_id"] for d in done}) == 2
    assert events[-1]["type"] == "response.completed"


def test_an_error_after_the_stream_started_is_an_error_event_and_the_lease_ends():
    events, h, _ = _events(StubEngine(fail_at=1))
    assert events[-1]["type"] == "error"
    assert events[-1]["code"] == "engine_unavailable"
    assert "response.completed" not in [e["type"] for e in events]
    assert h.records[0].status == "failed"
    assert h.engine.aborted == [h.records[0].request_id]


class _UnsettledJournal:
    """A journal that opens rows but cannot settle them: the database went away mid-request."""

    async def open(self, opened):
        return None

    async def close(self, record):
        from serving.errors import Unavailable

        raise Unavailable("the request's usage could not be recorded", code="metering_unavailable")


def test_a_response_whose_usage_cannot_be_settled_ends_in_an_error_not_completed():
    from serving.errors import Unavailable

    async def run(streamed):
        h = harness(journal=_UnsettledJournal())
        req = parse_responses_request(json.dumps({"model": "stub", "input": "hi", "stream": streamed}).encode())
        conversation = to_conversation(req)
        completion = await h.service.start(generation_request(req, conversation, 8), RecordingCaller())
        if not streamed:
            with pytest.raises(Unavailable) as refused:
                await complete(req, completion)
            return refused.value.code
        response = await stream(req, completion, conversation.param)
        return [json.loads(e.strip().split("\n")[1].removeprefix("data: ")) async for e in response.iterator]

    events = asyncio.run(run(True))
    assert [e["type"] for e in events][:2] == ["response.created", "response.in_progress"]
    assert "response.completed" not in [e["type"] for e in events]
    assert (events[-1]["type"], events[-1]["code"]) == ("error", "metering_unavailable")
    EVENTS.validate_python(events[-1])
    assert asyncio.run(run(False)) == "metering_unavailable"
