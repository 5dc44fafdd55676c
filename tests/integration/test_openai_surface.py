"""Structured outputs, tools, logprobs and n on the live server with the official SDK, on both pools; every
response and chunk is also checked against OpenAI's schemas by the client's transport."""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import openai
import pytest

from tests.conftest import API_KEY
from tests.integration import reference
from tests.shapes import CITY, CLOCK_FUNCTION, WEATHER_FUNCTION, chat_tool

WEATHER, CLOCK = chat_tool(WEATHER_FUNCTION), chat_tool(CLOCK_FUNCTION)
PROMPTS = [f"Describe city number {i} in JSON. Seed {i * 7919}." for i in range(20)]
SHORT_JSON = [f"Give a short JSON object with the name and country of city number {i}." for i in range(20)]
POOLS = ["small", "large"]


def _ask(client, model, prompt, **kw):
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}], **kw)


def _fan_out(fn, items):
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(fn, items))


@pytest.mark.parametrize("model", POOLS)
def test_json_schema_answers_parse_and_validate(client, model):
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}}
    answers = _fan_out(lambda p: _ask(client, model, p, max_tokens=96, response_format=fmt), PROMPTS)
    for resp in answers:
        assert resp.choices[0].finish_reason == "stop", resp.choices[0].message.content
        jsonschema.validate(json.loads(resp.choices[0].message.content), CITY)


@pytest.mark.parametrize("model", POOLS)
def test_json_object_answers_parse(client, model):
    answers = _fan_out(
        lambda p: _ask(client, model, p, max_tokens=128, response_format={"type": "json_object"}), SHORT_JSON
    )
    parsed = [json.loads(r.choices[0].message.content) for r in answers if r.choices[0].finish_reason == "stop"]
    assert len(parsed) == len(SHORT_JSON), [r.choices[0].message.content for r in answers]
    assert all(isinstance(p, dict) for p in parsed)


def test_a_cut_off_structured_answer_says_length(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}}
    resp = _ask(client, "small", PROMPTS[0], max_tokens=3, response_format=fmt)
    assert resp.choices[0].finish_reason == "length"


def test_a_schema_the_engine_cannot_enforce_is_a_400(client):
    broken = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "broken", "schema": broken}}
    with pytest.raises(openai.BadRequestError) as exc:
        _ask(client, "small", "hi", max_tokens=8, response_format=fmt)
    assert exc.value.body["param"] == "response_format"


@pytest.mark.parametrize("model", POOLS)
def test_vllm_structured_outputs_choice_and_regex(client, model):
    """vLLM's `structured_outputs` extension, sent as `extra_body` the way vLLM's own clients send it."""
    choices = ["The circle is red.", "The square is blue."]
    picked = _ask(client, model, "Which is it?", max_tokens=24, extra_body={"structured_outputs": {"choice": choices}})
    assert picked.choices[0].message.content in choices
    assert picked.choices[0].finish_reason == "stop"
    number = _ask(client, model, "A number?", max_tokens=8, extra_body={"structured_outputs": {"regex": "[0-9]{3}"}})
    assert len(number.choices[0].message.content) == 3
    assert number.choices[0].message.content.isdigit()
    with pytest.raises(openai.BadRequestError) as exc:
        _ask(client, model, "hi", max_tokens=8, extra_body={"structured_outputs": {"choice": ["a"], "regex": "b"}})
    assert exc.value.body["param"] == "structured_outputs"


def _calls(resp):
    return [(c.function.name, json.loads(c.function.arguments)) for c in resp.choices[0].message.tool_calls or []]


@pytest.mark.parametrize("model", POOLS)
@pytest.mark.parametrize("choice", ["required", "named"])
def test_forced_tool_calls_validate_against_their_parameters(client, model, choice):
    tool_choice = "required" if choice == "required" else {"type": "function", "function": {"name": "get_time"}}
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, CLOCK)}

    # Allowed parallel calls, the large demo repeats one call until max_tokens: one call each here.
    parallel = {"parallel_tool_calls": False} if model == "large" else {}

    def ask(prompt):
        return _ask(client, model, prompt, max_tokens=96, tools=[WEATHER, CLOCK], tool_choice=tool_choice, **parallel)

    for resp in _fan_out(ask, PROMPTS[:8]):
        calls = _calls(resp)
        assert calls, resp.choices[0]
        for name, arguments in calls:
            jsonschema.validate(arguments, schemas[name])
        assert resp.choices[0].message.content is None
        assert resp.choices[0].finish_reason == ("stop" if choice == "named" else "tool_calls")
        if choice == "named":
            assert [name for name, _ in calls] == ["get_time"]


@pytest.mark.parametrize("choice", ["required", "named"])
def test_streamed_tool_calls_reassemble_to_the_same_call(client, choice):
    tool_choice = "required" if choice == "required" else {"type": "function", "function": {"name": "get_weather"}}
    kw = {"max_tokens": 96, "tools": [WEATHER, CLOCK], "tool_choice": tool_choice}
    whole = _ask(client, "small", "Weather in Oslo?", **kw)
    pieces: dict[int, dict[str, str]] = {}
    reasons = []
    for chunk in _ask(client, "small", "Weather in Oslo?", stream=True, **kw):
        for choice_delta in chunk.choices:
            reasons.append(choice_delta.finish_reason)
            for call in choice_delta.delta.tool_calls or []:
                entry = pieces.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += call.id or ""
                entry["name"] += (call.function.name or "") if call.function else ""
                entry["arguments"] += (call.function.arguments or "") if call.function else ""
    streamed = [(p["name"], json.loads(p["arguments"])) for _, p in sorted(pieces.items())]
    assert streamed == _calls(whole)
    assert all(p["id"].startswith("call_") for p in pieces.values())
    assert reasons[-1] == whole.choices[0].finish_reason


def test_a_two_turn_tool_conversation(client):
    question = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
    first = client.chat.completions.create(
        model="large",
        messages=question,
        max_tokens=128,
        temperature=0,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,  # allowed more than one, the large demo repeats its call until max_tokens
    )
    assert first.choices[0].finish_reason == "tool_calls", first.choices[0]
    call = first.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    followup = [
        *question,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "clear"})},
    ]
    answer = client.chat.completions.create(model="large", messages=followup, max_tokens=24, temperature=0)
    assert answer.choices[0].message.content
    plain = client.chat.completions.create(model="large", messages=question, max_tokens=1, temperature=0)
    assert answer.usage.prompt_tokens > plain.usage.prompt_tokens + 10  # the call and its result are in the prompt
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="large", messages=[*question, {"role": "tool", "content": "18C"}])
    assert exc.value.body["param"] == "messages[1].tool_call_id"


def test_auto_needs_a_tool_parser(client):
    with pytest.raises(openai.BadRequestError) as exc:
        _ask(client, "small", "hi", max_tokens=8, tools=[WEATHER], tool_choice="auto")
    assert exc.value.body["param"] == "tool_choice"
    resp = _ask(client, "large", "What is the weather in Rome?", max_tokens=48, tools=[WEATHER])
    choice = resp.choices[0]
    if choice.message.tool_calls:  # the model chose to call; the parser turned its text into a call
        assert choice.finish_reason == "tool_calls"
        assert "<tool_call>" not in (choice.message.content or "")
    else:
        assert choice.message.content


def test_logprobs_equal_the_models_own_distribution(client):
    messages = [{"role": "user", "content": "Count: one, two,"}]
    resp = client.chat.completions.create(
        model="small",
        messages=messages,
        max_tokens=6,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )
    tokens = resp.choices[0].model_extra["token_ids"]
    expected = reference.greedy_logprobs("small", messages, tokens)
    content = resp.choices[0].logprobs.content
    assert len(content) == len(tokens)
    for entry, (chosen, top) in zip(content, expected, strict=True):
        assert math.isclose(entry.logprob, chosen, abs_tol=1e-3)
        assert [round(t.logprob, 3) for t in entry.top_logprobs] == [round(lp, 3) for lp in top]
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob


def test_streamed_logprobs_match_the_whole_answer(client):
    kw = {"max_tokens": 6, "logprobs": True, "top_logprobs": 2, "extra_body": {"ignore_eos": True}}
    whole = _ask(client, "small", "Count: one, two,", **kw).choices[0].logprobs.content
    streamed = [
        t
        for chunk in _ask(client, "small", "Count: one, two,", stream=True, **kw)
        for c in chunk.choices
        if c.logprobs
        for t in c.logprobs.content
    ]
    assert [(t.token, round(t.logprob, 4)) for t in streamed] == [(t.token, round(t.logprob, 4)) for t in whole]


def _receipt(server, request_id):
    """The usage row is written just after the response; wait for it, boundedly."""
    for _ in range(50):
        resp = httpx.get(f"{server.v1}/usage/{request_id}", headers={"authorization": f"Bearer {API_KEY}"}, timeout=30)
        if resp.status_code == 200:
            return resp.json()
        time.sleep(0.1)
    raise AssertionError(f"no usage row for {request_id}")


def test_n_choices_are_generated_metered_and_billed_together(client, server):
    resp = _ask(
        client, "small", "Say something.", max_tokens=5, n=3, temperature=1.0, seed=3, extra_body={"ignore_eos": True}
    )
    assert [c.index for c in resp.choices] == [0, 1, 2]
    assert resp.usage.completion_tokens == 15
    assert _receipt(server, resp.id)["tokens"]["output"] == 15
    streamed = _ask(
        client,
        "small",
        "Say something.",
        max_tokens=4,
        n=2,
        temperature=0.7,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(streamed)
    assert {c.choices[0].index for c in chunks if c.choices} == {0, 1}
    assert chunks[-1].usage.completion_tokens == 8
    with pytest.raises(openai.BadRequestError) as exc:
        _ask(client, "small", "Say something.", max_tokens=4, n=2)  # greedy: every choice would be the same
    assert exc.value.body["param"] == "n"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"store": True}, "store"),
        ({"audio": {"voice": "alloy", "format": "wav"}, "modalities": ["text", "audio"]}, "audio"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"reasoning_effort": "high"}, "reasoning_effort"),
        ({"service_tier": "priority"}, "service_tier"),
        ({"logit_bias": {"999999999": 5}}, "logit_bias"),
        ({"n": 2, "temperature": 0}, "n"),
    ],
)
def test_refused_fields_are_400s_naming_their_param(client, extra, param):
    with pytest.raises(openai.BadRequestError) as exc:
        _ask(client, "small", "hi", max_tokens=2, **extra)
    assert exc.value.body["param"] == param
