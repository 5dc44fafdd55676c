"""Tool plans and the decoder that turns a choice's text into content and tool calls."""

import json

import jsonschema
import pytest

from serving.engines.base import EngineDelta
from serving.tools import NONE, REQUIRED, OutputDecoder, ToolPlan, ToolSpec

WEATHER = ToolSpec(
    "get_weather",
    "Weather for a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TIME = ToolSpec("get_time", None, None)


def _delta(text, reason=None):
    return EngineDelta(text, [1], [], 0, reason)


def test_required_and_named_choices_are_constrained_by_schema():
    required = ToolPlan((WEATHER, TIME), REQUIRED, parallel=False).constraint().json_schema
    calls = [{"name": "get_weather", "parameters": {"city": "Paris"}}]
    jsonschema.validate(calls, required)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(calls * 2, required)  # one call at most without parallel calls
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "get_weather", "parameters": {}}], required)  # `city` is required
    named = ToolPlan((WEATHER, TIME), "get_weather").constraint().json_schema
    assert named == WEATHER.parameters
    assert ToolPlan((WEATHER,), "auto").constraint() is None
    assert ToolPlan((WEATHER,), NONE).rendered_tools() is None
    assert [t["function"]["name"] for t in ToolPlan((WEATHER, TIME), "get_time").rendered_tools()] == ["get_time"]


def test_named_choice_streams_arguments_as_one_call():
    decoder = OutputDecoder(ToolPlan((WEATHER,), "get_weather"))
    first = decoder.feed(_delta('{"city": '))
    second = decoder.feed(_delta('"Paris"}', "stop"))
    decoder.finish()
    assert first.tool_calls[0].name == "get_weather"
    assert first.tool_calls[0].id.startswith("call_")
    assert second.tool_calls[0].id is None
    assert first.tool_calls[0].arguments + second.tool_calls[0].arguments == '{"city": "Paris"}'
    assert [(c.name, json.loads(c.arguments)) for c in decoder.calls] == [("get_weather", {"city": "Paris"})]
    assert decoder.content() is None


def test_required_choice_emits_whole_calls_once_the_array_closes():
    decoder = OutputDecoder(ToolPlan((WEATHER, TIME), REQUIRED))
    assert decoder.feed(_delta('[{"name": "get_time", "parameters": {}}, ')).tool_calls == ()
    decoder.feed(_delta('{"name": "get_weather", "parameters": {"city": "Oslo"}}]', "stop"))
    final = decoder.finish()
    assert [(p.index, p.name) for p in final.tool_calls] == [(0, "get_time"), (1, "get_weather")]
    assert json.loads(decoder.calls[1].arguments) == {"city": "Oslo"}
    cut = OutputDecoder(ToolPlan((WEATHER,), REQUIRED))
    cut.feed(_delta('[{"name": "get_wea', "length"))
    assert cut.finish().tool_calls == ()  # cut off by max_tokens: no half call is invented


def test_without_tools_text_passes_through():
    decoder = OutputDecoder(None)
    assert decoder.feed(_delta("Hello")).content == "Hello"
    decoder.finish()
    assert (decoder.content(), decoder.calls) == ("Hello", [])
