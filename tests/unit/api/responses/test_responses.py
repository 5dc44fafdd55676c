"""The Responses API without an engine: input items become chat messages, refused fields name their `param`, and
a stub completion renders as a `response` body and as typed SSE events that the openai SDK's models accept."""

from __future__ import annotations

import json
import logging

import pytest
from openai.types.responses import response_create_params

from api.responses.parsing import generation_request, parse_responses_request, to_conversation
from api.responses.protocol import UNHONOURED, ResponsesRequest
from serving.engines.base import StructuredOutput
from serving.errors import InvalidRequest

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


@pytest.mark.parametrize(
    "body",
    [
        {"store": False},
        {"store": None},
        {"store": True, "previous_response_id": "resp_1"},
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
    caplog.set_level(logging.INFO, logger="api.responses.parsing")
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
