"""`POST /v1/responses` on the live server with the official SDK: text, image and audio input, streamed and not,
structured output, function tools over two turns, the usage row of the lease, and the refused fields."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests import media
from tests.conftest import API_KEY
from tests.shapes import CITY, CLOCK_FUNCTION, WEATHER_FUNCTION, responses_tool

EVENTS = TypeAdapter(ResponseStreamEvent)
AUTH = {"authorization": f"Bearer {API_KEY}"}
WEATHER, CLOCK = responses_tool(WEATHER_FUNCTION), responses_tool(CLOCK_FUNCTION)
SCHEMAS = {t["name"]: t["parameters"] for t in (WEATHER, CLOCK)}


def _image(seed=0):
    return {"type": "input_image", "image_url": media.png_data_url(seed), "detail": "auto"}


def _audio(seconds=2.0):
    return {"type": "input_audio", "input_audio": {"data": media.audio_b64(seconds), "format": "wav"}}


def _create(client, model="small", **kw):
    kw.setdefault("max_output_tokens", 6)
    kw.setdefault("temperature", 0)
    return client.responses.create(model=model, **kw)


def _receipt(server, request_id):
    for _ in range(50):
        found = httpx.get(f"{server.v1}/usage/{request_id}", headers=AUTH, timeout=30)
        if found.status_code == 200:
            return found.json()
    raise AssertionError(f"no usage row for {request_id}: {found.status_code} {found.text}")


@pytest.mark.parametrize("model", ["small", "large"])
def test_text_input_answers_as_a_typed_response(client, model):
    raw = client.responses.with_raw_response.create(
        model=model, input="Hi", instructions="Answer briefly.", max_output_tokens=6, temperature=0, metadata={"k": "v"}
    )
    resp = raw.parse()
    assert isinstance(resp, Response)
    Response.model_validate(json.loads(raw.text))  # every required field is there, with its type
    assert resp.id.startswith("resp_")
    assert raw.headers["x-tessera-request-id"] == "chatcmpl-" + resp.id.removeprefix("resp_")
    assert (resp.object, resp.model, resp.metadata, resp.store) == ("response", model, {"k": "v"}, True)
    assert resp.status in ("completed", "incomplete")
    assert resp.output[0].type == "message"
    assert resp.output[0].content[0].type == "output_text"
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    assert resp.usage.output_tokens_details.reasoning_tokens == 0
    chat = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Hi"}],
        max_tokens=6,
        temperature=0,
    )
    assert resp.usage.input_tokens == chat.usage.prompt_tokens
    assert resp.output_text == chat.choices[0].message.content


def test_large_answers_sensibly(client):
    resp = _create(client, "large", input="What is the capital of France?", max_output_tokens=16)
    assert "Paris" in resp.output_text


def test_a_cut_off_answer_is_incomplete(client):
    resp = _create(client, input="Tell me a long story.", max_output_tokens=2)
    assert resp.status == "incomplete"
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage.output_tokens == 2


def test_image_and_audio_count_as_in_chat_and_the_lease_is_metered(client, server):
    content = [{"type": "input_text", "text": "Compare"}, _image(1), {"type": "input_text", "text": "with"}, _audio()]
    raw = client.responses.with_raw_response.create(
        model="small", input=[{"role": "user", "content": content}], max_output_tokens=4, temperature=0
    )
    resp = raw.parse()
    details = resp.usage.input_tokens_details.model_extra
    assert (details["image_tokens"], details["audio_tokens"]) == (54, 50)
    chat_content = [
        {"type": "text", "text": "Compare"},
        {"type": "image_url", "image_url": {"url": media.png_data_url(1)}},
        {"type": "text", "text": "with"},
        {"type": "input_audio", "input_audio": {"data": media.audio_b64(2.0), "format": "wav"}},
    ]
    chat = client.chat.completions.create(
        model="small", messages=[{"role": "user", "content": chat_content}], max_tokens=4, temperature=0
    )
    assert resp.usage.input_tokens == chat.usage.prompt_tokens
    receipt = _receipt(server, raw.headers["x-tessera-request-id"])
    assert receipt["tokens"]["image"] == 54
    assert receipt["tokens"]["audio"] == 50
    assert receipt["tokens"]["output"] == resp.usage.output_tokens
    assert receipt["status"] == "completed"


@pytest.mark.parametrize("media_part", ["image", "audio"])
def test_a_streamed_response_matches_the_whole_one(client, media_part):
    part = _image(2) if media_part == "image" else _audio(1.0)
    kw = {"input": [{"role": "user", "content": [{"type": "input_text", "text": "Describe."}, part]}]}
    whole = _create(client, max_output_tokens=8, **kw)
    events = list(_create(client, max_output_tokens=8, stream=True, **kw))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        f"response.{whole.status}",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert text == final.output_text == whole.output_text
    assert final.usage.input_tokens == whole.usage.input_tokens
    assert final.id == events[0].response.id


def test_raw_stream_events_are_openais_typed_events(server):
    body = {"model": "small", "input": "Hi", "max_output_tokens": 4, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.v1}/responses", json=body, headers=AUTH, timeout=60) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        blocks = resp.read().decode().strip().split("\n\n")
    for block in blocks:
        name, data = block.split("\n")
        payload = json.loads(data.removeprefix("data: "))
        assert name == f"event: {payload['type']}"
        EVENTS.validate_python(payload)  # strictly, unlike the SDK, which builds its models without checking
    assert "[DONE]" not in blocks[-1]


def test_json_schema_output_parses_and_validates_on_large(client):
    fmt = {"type": "json_schema", "name": "city", "schema": CITY, "strict": True}
    prompts = [f"Describe city number {i} in JSON." for i in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(
            pool.map(lambda p: _create(client, "large", input=p, max_output_tokens=96, text={"format": fmt}), prompts)
        )
    for resp in answers:
        assert resp.status == "completed", resp.output_text
        jsonschema.validate(json.loads(resp.output_text), CITY)
        assert resp.text.format.type == "json_schema"


def _calls(resp):
    return [(o.name, json.loads(o.arguments)) for o in resp.output if o.type == "function_call"]


@pytest.mark.parametrize("choice", ["required", "named"])
def test_function_calls_validate_against_their_parameters(client, choice):
    tool_choice = "required" if choice == "required" else {"type": "function", "name": "get_time"}
    resp = _create(
        client,
        "large",
        input="What time is it in Berlin?",
        max_output_tokens=96,
        tools=[WEATHER, CLOCK],
        tool_choice=tool_choice,
    )
    calls = _calls(resp)
    assert calls, resp.output
    for name, arguments in calls:
        jsonschema.validate(arguments, SCHEMAS[name])
    if choice == "named":
        assert [name for name, _ in calls] == ["get_time"]
    assert all(o.call_id.startswith("call_") and o.id.startswith("fc_") for o in resp.output)
    assert resp.status == "completed"


def test_streamed_function_call_arguments_reassemble(client):
    kw = {"input": "Weather in Oslo?", "max_output_tokens": 96, "tools": [WEATHER], "tool_choice": "required"}
    events = list(_create(client, "large", stream=True, **kw))
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) >= 1
    assert deltas == "".join(d.arguments for d in done)
    final = events[-1].response
    assert [(o.name, json.loads(o.arguments)) for o in final.output] == [
        (e.item.name, json.loads(e.item.arguments)) for e in events if e.type == "response.output_item.done"
    ]
    for _, arguments in _calls(final):
        jsonschema.validate(arguments, WEATHER["parameters"])


def test_a_two_turn_function_conversation(client):
    question = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
    # One call: with parallel calls allowed, the demo model repeats its call until it is cut off.
    kw = {"max_output_tokens": 64, "tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False}
    first = _create(client, "large", input=question, **kw)
    calls = [o for o in first.output if o.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather"], first.output
    assert (first.status, first.parallel_tool_calls) == ("completed", False)
    results = [
        {"type": "function_call_output", "call_id": c.call_id, "output": json.dumps({"temperature": 18})} for c in calls
    ]
    conversation = [*question, *[c.model_dump(exclude_none=True) for c in calls], *results]
    answer = _create(client, "large", input=conversation, tools=[WEATHER], tool_choice="none", max_output_tokens=24)
    assert answer.output_text
    chat_tool = {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}
    chat_calls = [
        {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
    ]
    chat = client.chat.completions.create(
        model="large",
        messages=[
            *question,
            {"role": "assistant", "content": None, "tool_calls": chat_calls},
            *[{"role": "tool", "tool_call_id": r["call_id"], "content": r["output"]} for r in results],
        ],
        tools=[chat_tool],
        tool_choice="none",
        max_tokens=24,
        temperature=0,
    )
    assert answer.usage.input_tokens == chat.usage.prompt_tokens  # the same prompt as the chat API's tool turns
    assert answer.output_text == chat.choices[0].message.content


def test_auto_tool_choice_on_large(client):
    resp = _create(client, "large", input="What is the weather in Rome?", max_output_tokens=48, tools=[WEATHER])
    assert resp.tool_choice == "auto"
    for _, arguments in _calls(resp):
        jsonschema.validate(arguments, WEATHER["parameters"])
    assert "<tool_call>" not in resp.output_text


def _user(*parts):
    return {"input": [{"role": "user", "content": list(parts)}]}


BROKEN_IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
UNENFORCEABLE = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}


@pytest.mark.parametrize(
    ("param", "kw"),
    [
        ("stream", {"background": True, "stream": True}),
        ("store", {"background": True, "store": False}),
        ("conversation", {"conversation": "conv_123", "previous_response_id": "resp_1"}),  # one or the other
        ("include", {"include": ["message.output_text.logprobs"]}),
        ("reasoning", {"reasoning": {"effort": "low"}}),
        ("truncation", {"truncation": "auto"}),
        ("top_logprobs", {"top_logprobs": 2}),
        ("tools", {"tools": [{"type": "web_search"}]}),
        ("tool_choice", {"tools": [WEATHER]}),  # auto on a pool without a tool-call parser
        ("input[0].content[0].file_id", _user({"type": "input_image", "file_id": "file-1"})),
        ("input[0].content[1].image_url", _user({"type": "input_text", "text": "x"}, BROKEN_IMAGE)),
        ("input[0].type", {"input": [{"type": "item_reference", "id": "msg_1"}]}),
        ("previous_response_id", {"previous_response_id": ""}),
        ("text.format", {"text": {"format": {"type": "json_schema", "name": "b", "schema": UNENFORCEABLE}}}),
    ],
)
def test_refused_fields_are_400s_naming_their_param(client, param, kw):
    kw.setdefault("input", "hi")
    with pytest.raises(openai.BadRequestError) as exc:
        _create(client, **kw)
    assert exc.value.body["param"] == param, exc.value.body
    assert exc.value.status_code == 400


def test_store_false_is_accepted_and_echoed(client):
    resp = _create(client, input="hi", store=False, user="u-1", max_output_tokens=2)
    assert (resp.store, resp.user) == (False, "u-1")
