"""The Responses API without an engine: input items become chat messages, refused fields name their `param`, and
a stub completion renders as a `response` body and as typed SSE events that the openai SDK's models accept."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from openai.types.responses import Response as SdkResponse
from openai.types.responses import ResponseStreamEvent, response_create_params
from pydantic import TypeAdapter

from api.responses import generation_request, parse_responses_request, to_conversation
from api.responses_protocol import UNHONOURED, ResponsesRequest
from api.responses_rendering import complete, lease_id, response_id, stream
from serving.engine import EngineDelta, StructuredOutput
from serving.errors import InvalidRequest
from tests.stubs import PROMPT, RecordingCaller, StubEngine, harness

EVENTS = TypeAdapter(ResponseStreamEvent)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _parse(**body):
    return parse_responses_request(json.dumps({"model": "small", "input": "hi", **body}).encode())


def _messages(**body):
    return [m.model_dump(exclude_none=True) for m in to_conversation(_parse(**body)).messages]


def _build(**body):
    req = _parse(**body)
    return generation_request(req, to_conversation(req), 16)


def _refused(param, **body):
    with pytest.raises(InvalidRequest) as caught:
        _build(**body)
    assert caught.value.param == param, caught.value.message
    return caught.value


# -- input items to chat messages -------------------------------------------------------------------------------


def test_a_string_input_is_one_user_message_after_the_instructions():
    assert _messages(instructions="Be brief.") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


def test_message_items_with_text_image_and_audio_parts():
    content = [
        {"type": "input_text", "text": "Compare"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
        {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
    ]
    items = [
        {"role": "developer", "content": "Answer in French."},  # an easy message: no `type`
        {"type": "message", "role": "user", "content": content},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Bien.", "annotations": []}]},
    ]  # fmt: skip
    assert _messages(input=items) == [
        {"role": "developer", "content": "Answer in French."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Bien."}]},
    ]


def test_function_calls_join_the_assistant_turn_and_outputs_become_tool_turns():
    items = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": '{"city":"Rome"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "rain"}]},
    ]
    messages = _messages(input=items)
    assert messages[1] == {
        "role": "assistant",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'}},
        ],
    }
    assert messages[2:] == [
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
        {"role": "tool", "content": "rain", "tool_call_id": "call_2"},
    ]


def test_serving_params_are_named_in_the_requests_terms():
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": "x"}]}
    ]
    conversation = to_conversation(_parse(instructions="sys", input=items))
    assert conversation.param("messages[1].content[1].image_url.url") == "input[0].content[1].image_url"
    assert conversation.param("messages[0].content") == "instructions"
    assert conversation.param("messages") == "input"
    assert conversation.param("response_format") == "text.format"
    assert conversation.param("tool_choice") == "tool_choice"
    assert to_conversation(_parse()).param("messages[0].content") == "input"


def test_parameters_reach_the_generation_request():
    req = _parse(max_output_tokens=5, temperature=0.2, top_p=0.5, tools=[WEATHER], tool_choice="required")
    request = generation_request(req, to_conversation(req), 16)
    assert (request.params.max_tokens, request.params.temperature, request.params.top_p) == (5, 0.2, 0.5)
    assert request.tools is not None
    assert request.tools.choice == "required"
    assert request.tools.tools[0].parameters == WEATHER["parameters"]
    named = _parse(tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"}, parallel_tool_calls=False)
    plan = generation_request(named, to_conversation(named), 16).tools
    assert plan is not None
    assert (plan.choice, plan.parallel) == ("get_weather", False)
    assert generation_request(_parse(), to_conversation(_parse()), 16).params.max_tokens == 16


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ({"type": "text"}, None),
        ({"type": "json_object"}, StructuredOutput(json_object=True)),
        (
            {"type": "json_schema", "name": "city", "schema": {"type": "object"}, "strict": True},
            StructuredOutput(json_schema={"type": "object"}),
        ),
    ],
)
def test_text_format_becomes_a_structured_output(fmt, expected):
    req = _parse(text={"format": fmt})
    assert generation_request(req, to_conversation(req), 16).params.structured == expected


def _user(*parts):
    return {"input": [{"role": "user", "content": list(parts)}]}


IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}


# -- refusals -----------------------------------------------------------------------------------------------------


def test_every_field_the_sdk_sends_is_honoured_or_refused():
    sdk_fields = set(response_create_params.ResponseCreateParamsBase.__annotations__) | {"stream"}
    assert sdk_fields - set(ResponsesRequest.model_fields) - set(UNHONOURED) == set()


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("store", True),
        ("previous_response_id", "resp_1"),
        ("background", True),
        ("conversation", "conv_1"),
        ("include", ["message.output_text.logprobs"]),
        ("reasoning", {"effort": "high"}),
        ("truncation", "auto"),
        ("prompt", {"id": "pmpt_1"}),
        ("max_tool_calls", 3),
        ("top_logprobs", 2),
        ("service_tier", "flex"),
        ("context_management", [{"type": "compaction"}]),
    ],
)
def test_unhonoured_openai_fields_are_refused_with_their_param(param, value):
    err = _refused(param, **{param: value})
    assert err.code == "unsupported_parameter"
    if param == "store":
        assert "not stored" in err.message


@pytest.mark.parametrize(
    "body",
    [
        {"store": False},
        {"store": None},
        {"include": []},
        {"background": False},
        {"truncation": "disabled"},
        {"reasoning": {"effort": None, "summary": None}},
        {"service_tier": "auto"},
        {"user": "u1", "metadata": {"k": "v"}, "safety_identifier": "s", "prompt_cache_key": "p", "vendor_x": 1},
    ],
)
def test_values_that_ask_for_nothing_are_accepted(body):
    _build(**body)


def test_unknown_fields_are_logged_and_checked_ones_are_not(caplog):
    caplog.set_level(logging.INFO, logger="api.responses")
    _build(store=False, vendor_x=1, input=[{"role": "user", "content": "x", "vendor_y": 2}])
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "vendor_x" in logged
    assert "input[0].vendor_y" in logged
    assert "store" not in logged


@pytest.mark.parametrize(
    ("param", "body"),
    [
        ("tools", {"tools": [{"type": "web_search"}]}),
        ("tools[0].name", {"tools": [{"type": "function", "parameters": {}}]}),
        ("tool_choice", {"tools": [WEATHER], "tool_choice": {"type": "file_search"}}),
        ("tool_choice", {"tool_choice": "required"}),
        ("tool_choice", {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "other"}}),
        ("text.format.schema", {"text": {"format": {"type": "json_schema", "name": "x"}}}),
        ("text.format.type", {"text": {"format": {"type": "yaml"}}}),
        ("text.verbosity", {"text": {"verbosity": "low"}}),
        ("input", {"input": []}),
        ("input", {"input": 5}),
        ("input[0].content[0].file_id", _user({"type": "input_image", "file_id": "f"})),
        ("input[0].content[0].type", _user({"type": "input_file", "file_id": "f"})),
        ("input[0].content[0].type", _user({"type": "input_video"})),
        ("input[0].content[0].text", _user({"type": "input_text"})),
        ("input[0].type", {"input": [{"type": "reasoning", "summary": []}]}),
        ("input[0].type", {"input": [{"type": "item_reference", "id": "msg_1"}]}),
        ("input[0].role", {"input": [{"role": "tool", "content": "x"}]}),
        ("input[0].call_id", {"input": [{"type": "function_call_output", "output": "x"}]}),
        ("input[0].output[0].type", {"input": [{"type": "function_call_output", "call_id": "c", "output": [IMAGE]}]}),
        ("input[0].arguments", {"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}),
        ("model", {"model": None}),
        ("stream", {"stream": "yes"}),
        ("max_output_tokens", {"max_output_tokens": 0}),
    ],
)  # fmt: skip
def test_bad_requests_name_their_param(param, body):
    _refused(param, **body)


def test_the_body_must_be_a_json_object():
    for body in (b"{", b"[1]"):
        with pytest.raises(InvalidRequest) as caught:
            parse_responses_request(body)
        assert caught.value.code == "invalid_json"


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,  # was a RecursionError, a 500
        b'{"model":"small","input":"a\\ud800b"}',  # was accepted, then failed in the tokenizer
    ],
    ids=["nested-too-deeply", "lone-surrogate"],
)
def test_bodies_no_tokenizer_can_take_are_400s(body):
    with pytest.raises(InvalidRequest) as caught:
        parse_responses_request(body)
    assert caught.value.code == "invalid_json"


# -- rendering on a stub engine -----------------------------------------------------------------------------------


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
