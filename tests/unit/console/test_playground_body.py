"""The playground form becomes an OpenAI chat request: its structured-output and tool boxes map to
`response_format`, `tools` and `tool_choice`, and what they cannot mean is refused with the form's own words,
naming the param. Every body it builds is one the API's parser takes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from api.chat.parsing import generation_request, parse_chat_request
from console.controllers import _chat_body
from serving.errors import InvalidRequest

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "coastal": {"type": "boolean"}},
    "required": ["city", "coastal"],
    "additionalProperties": False,
}
WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CLOCK = {"name": "get_time", "parameters": {"type": "object", "properties": {}}}


def body(**fields: Any) -> dict[str, Any]:
    form = {"model": "large", "text": "hi", "max_tokens": "32", "temperature": "0", **fields}
    built = asyncio.run(_chat_body(form))
    generation_request(parse_chat_request(json.dumps(built).encode()), 64)  # the API takes it as it is
    return built


def refusal(**fields: Any) -> InvalidRequest:
    form = {"model": "large", "text": "hi", **fields}
    with pytest.raises(InvalidRequest) as exc:
        asyncio.run(_chat_body(form))
    return exc.value


def test_a_plain_form_sends_none_of_the_new_fields():
    built = body(response_format="text", json_schema="", tools="", tool_choice="auto")
    assert not {"response_format", "tools", "tool_choice"} & built.keys()
    assert built["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert built["stream"] is True
    # A form from before these boxes (as the cache-salt test posts) is still a plain request.
    assert not {"response_format", "tools", "tool_choice"} & body().keys()


def test_json_object_and_a_bare_schema_map_to_response_format():
    assert body(response_format="json_object")["response_format"] == {"type": "json_object"}
    built = body(response_format="json_schema", json_schema=json.dumps(SCHEMA, indent=2))
    assert built["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True},
    }


def test_openais_json_schema_object_is_sent_as_it_is():
    wrapped = {"name": "city", "schema": SCHEMA, "strict": False, "description": "A city."}
    built = body(response_format="json_schema", json_schema=json.dumps(wrapped))
    assert built["response_format"] == {"type": "json_schema", "json_schema": wrapped}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"response_format": "json_schema", "json_schema": '{"type": "object",'}, "The JSON schema is not valid JSON"),
        ({"response_format": "json_schema", "json_schema": "{'type': 'object'}"}, "line 1, column 2"),
        ({"response_format": "json_schema", "json_schema": '{"maximum": NaN}'}, "NaN is not JSON"),
        ({"response_format": "json_schema", "json_schema": '["object"]'}, "must be a JSON object"),
        ({"response_format": "json_schema", "json_schema": "  "}, "needs a schema"),
        ({"response_format": "text", "json_schema": json.dumps(SCHEMA)}, "the response format is text"),
        ({"response_format": "json_object", "json_schema": "{}"}, "response format is JSON object"),
        ({"response_format": "yaml"}, "text, JSON object or JSON schema"),
    ],
)
def test_response_format_refusals_name_the_param(fields, message):
    err = refusal(**fields)
    assert message in err.message
    assert err.param == "response_format"


def test_tools_in_openais_shape_bare_functions_and_a_single_object():
    openai_shape = [{"type": "function", "function": WEATHER}]
    expected = [{"type": "function", "function": WEATHER}, {"type": "function", "function": CLOCK}]
    assert body(tools=json.dumps(openai_shape))["tools"] == openai_shape
    assert body(tools=json.dumps([WEATHER, CLOCK]))["tools"] == expected
    assert body(tools=json.dumps([openai_shape[0], CLOCK]))["tools"] == expected  # mixed
    assert body(tools=json.dumps(WEATHER))["tools"] == expected[:1]  # one object, not in a list
    # The Responses API's flat shape: the type is dropped from the function and put on the tool.
    assert body(tools=json.dumps({"type": "function", **CLOCK}))["tools"] == expected[1:]
    assert "tools" not in body(tools="[]", tool_choice="auto")  # an empty list is no tools
    assert refusal(tools="[]", tool_choice="required").param == "tool_choice"


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ('[{"name": "get_weather"', "Tools is not valid JSON"),
        ('"get_weather"', "must be a JSON list of functions"),
        ('["get_weather"]', "Tool 1 must be a JSON object"),
        ('[{"name": "a"}, {"description": "no name"}]', "Tool 2 needs a function name"),
        ('[{"type": "function", "function": {"name": " "}}]', "Tool 1 needs a function name"),
        ('[{"type": "function", "function": "get_time"}]', "Tool 1 needs a function name"),
        ('[{"type": "web_search"}]', "only function tools"),
    ],
)
def test_tools_refusals_name_the_param(tools, message):
    err = refusal(tools=tools)
    assert message in err.message
    assert err.param == "tools"


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("required", "required"),
        ("none", "none"),
        ("function:get_time", {"type": "function", "function": {"name": "get_time"}}),
        ("get_weather", {"type": "function", "function": {"name": "get_weather"}}),  # a bare name, without JS
    ],
)
def test_tool_choice_maps_to_openais_values(choice, expected):
    built = body(tools=json.dumps([WEATHER, CLOCK]), tool_choice=choice)
    assert built["tool_choice"] == expected


def test_tool_choice_without_tools():
    assert "tool_choice" not in body(tool_choice="auto")
    assert "tool_choice" not in body(tool_choice="none")
    assert "tool_choice" not in body(tools=json.dumps([WEATHER]), tool_choice="")  # the API's default: auto
    for choice in ("required", "function:get_time"):
        err = refusal(tool_choice=choice)
        assert "needs tools" in err.message
        assert err.param == "tool_choice"


def test_a_named_choice_must_be_one_of_the_tools():
    err = refusal(tools=json.dumps([WEATHER, CLOCK]), tool_choice="function:get_date")
    assert err.param == "tool_choice"
    assert err.message == "Tool choice names 'get_date', which is not one of the tools (get_weather, get_time)."


def test_schema_and_tools_together():
    built = body(
        response_format="json_schema",
        json_schema=json.dumps(SCHEMA),
        tools=json.dumps([WEATHER]),
        tool_choice="none",
    )
    assert built["response_format"]["json_schema"]["schema"] == SCHEMA
    assert built["tools"] == [{"type": "function", "function": WEATHER}]
    assert built["tool_choice"] == "none"


def test_the_playground_opens_on_the_strongest_pool_that_takes_the_most_media():
    from types import SimpleNamespace

    from console.controllers import preferred_model

    small = SimpleNamespace(name="small", modalities=["text", "image", "audio"], strength=0)
    large = SimpleNamespace(name="large", modalities=["text", "image", "audio"], strength=1)
    seeing = SimpleNamespace(name="large", modalities=["text", "image"], strength=1)
    assert preferred_model([small, large]) == "large"  # type: ignore[list-item]
    assert preferred_model([small, seeing]) == "small"  # type: ignore[list-item]
    assert preferred_model([]) == "auto"
