import json
import logging

import pytest

from api.chat.parsing import generation_request, parse_chat_request
from api.errors import to_api_error
from serving.errors import (
    Conflict,
    EngineUnavailable,
    ErrorKind,
    InvalidRequest,
    MediaError,
    NotFound,
    PermissionDenied,
    RateLimited,
)


def _parse(body):
    return parse_chat_request(json.dumps(body).encode())


def test_unknown_fields_are_accepted_and_logged(caplog):
    caplog.set_level(logging.INFO, logger="api.chat.parsing")
    req = _parse(
        {
            "model": "small",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {}}]}],
            "vendor_hint": {},
            "trace_label": "auto",
        }
    )
    assert req.model == "small"
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "vendor_hint" in logged
    assert "trace_label" in logged
    assert "messages[0].content[0].cache_control" in logged


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "small"}, "messages", "missing_field"),
        ({"model": "small", "messages": []}, "messages", "invalid_value"),
        ({"model": "small", "messages": [{"role": "user", "content": "x"}], "temperature": 9}, "temperature", None),
        ({"model": "small", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", None),
        ({"messages": [{"role": "user", "content": "x"}]}, "model", "missing_field"),
        ({"model": "small", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens", None),
    ],
)
def test_schema_errors_name_the_param(body, param, code):
    with pytest.raises(InvalidRequest) as exc:
        _parse(body)
    assert exc.value.param == param
    assert exc.value.kind is ErrorKind.INVALID_REQUEST
    assert to_api_error(exc.value).status_code == 400
    if code:
        assert exc.value.code == code


def test_invalid_json():
    with pytest.raises(InvalidRequest) as exc:
        parse_chat_request(b"{not json")
    assert exc.value.code == "invalid_json"


def test_error_mapping_shapes():
    err = to_api_error(MediaError("bad", code="invalid_image", param="p"))
    assert err.body() == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "p", "code": "invalid_image"}
    }
    unavailable = to_api_error(EngineUnavailable("down", retry_after_s=7))
    assert unavailable.status_code == 503
    assert unavailable.headers["retry-after"] == "7"
    crash = to_api_error(RuntimeError("boom"))
    assert crash.status_code == 500
    assert "boom" not in crash.message


def test_each_kind_maps_to_one_status_and_type():
    cases = [
        (NotFound("no such model", code="model_not_found", param="model"), 404, "invalid_request_error"),
        (PermissionDenied("not this model", code="model_not_allowed"), 403, "permission_error"),
        (Conflict("exists", code="tenant_exists"), 409, "invalid_request_error"),
        (
            RateLimited("slow down", retry_after_s=1.5, limits={"x-ratelimit-limit-requests": "2"}),
            429,
            "rate_limit_error",
        ),
    ]
    for exc, status, error_type in cases:
        err = to_api_error(exc)
        assert (err.status_code, err.error_type, err.code) == (status, error_type, exc.code)
    limited = to_api_error(cases[-1][0])
    assert limited.headers == {"x-ratelimit-limit-requests": "2", "retry-after": "2", "retry-after-ms": "1500"}


def _generation(**body):
    return generation_request(_parse({"model": "small", "messages": [{"role": "user", "content": "x"}], **body}), 16)


def test_sampling_fields_reach_the_engine_parameters():
    params = _generation(n=3, logprobs=True, top_logprobs=2, response_format={"type": "json_object"}).params
    assert (params.n, params.logprobs, params.structured.json_object) == (3, 2, True)
    assert _generation(logprobs=True).params.logprobs == 0  # the sampled token's logprob only
    assert _generation().params.logprobs is None
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "thing", "schema": schema, "strict": True}}
    assert _generation(response_format=fmt).params.structured.json_schema == schema
    assert _generation(response_format={"type": "text"}).params.structured is None


def test_vllm_structured_outputs_extension_reaches_the_engine():
    choice = _generation(structured_outputs={"choice": ["yes", "no"]}).params.structured
    assert choice.choice == ("yes", "no")
    assert choice.vllm_fields() == {"choice": ["yes", "no"]}
    assert _generation(structured_outputs={"regex": "[0-9]+"}).params.structured.vllm_fields() == {"regex": "[0-9]+"}
    assert _generation(structured_outputs={"json": {"type": "object"}}).params.structured.json_schema == {
        "type": "object"
    }
    assert _generation(structured_outputs={"json_object": True}).params.structured.json_object


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"structured_outputs": {}}, "structured_outputs"),
        ({"structured_outputs": {"choice": ["a"], "regex": "a"}}, "structured_outputs"),
        ({"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
        ({"structured_outputs": {"choice": ["a", ""]}}, "structured_outputs.choice"),
        ({"structured_outputs": {"regex": "(unclosed"}}, "structured_outputs.regex"),
        ({"structured_outputs": {"grammar": "root ::= 'a'"}}, "structured_outputs.grammar"),
        (
            {"structured_outputs": {"choice": ["a"]}, "response_format": {"type": "json_object"}},
            "structured_outputs",
        ),
    ],
)
def test_bad_structured_outputs_name_their_param(body, param):
    with pytest.raises(InvalidRequest) as exc:
        _generation(**body)
    assert exc.value.param == param


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"n": 17}, "n"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"top_logprobs": 21, "logprobs": True}, "top_logprobs"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "g"}},
            },
            "tool_choice",
        ),
        (
            {
                "tools": [
                    {"type": "function", "function": {"name": "f"}},
                    {"type": "function", "function": {"name": "f"}},
                ]
            },
            "tools",
        ),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
    ],
)
def test_bad_sampling_and_tool_fields_name_their_param(body, param):
    with pytest.raises(InvalidRequest) as exc:
        _generation(**body)
    assert exc.value.param == param


def test_tools_become_a_plan():
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    plan = _generation(tools=tools).tools
    assert (plan.choice, plan.parallel, plan.tools[0].name) == ("auto", True, "get_weather")
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert _generation(tools=tools, tool_choice=named, parallel_tool_calls=False).tools.choice == "get_weather"
    assert _generation(tools=tools, tool_choice="none").tools.rendered_tools() is None


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":"small","messages":[{"role":"user","content":"a\\ud800b"}]}',
        b'{"model":"small","messages":[{"role":"user","content":"\\ude00\\ud83d"}]}',
        b"[" * 100_000 + b"]" * 100_000,
    ],
)
def test_bodies_no_tokenizer_can_take_are_400s(body):
    with pytest.raises(InvalidRequest) as exc:
        parse_chat_request(body)
    assert exc.value.code == "invalid_json"


def test_surrogate_pairs_and_escaped_backslashes_are_text():
    req = parse_chat_request(b'{"model":"small","messages":[{"role":"user","content":"\\ud83d\\ude00 \\\\ud800"}]}')
    assert req.messages[0].content == "\U0001f600 \\ud800"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"seed": 2**70}, "seed"),  # was sent to the engine, which failed on it: a 503 for a bad input
        ({"seed": -(2**63) - 1}, "seed"),
        ({"min_tokens": 17}, "min_tokens"),  # past the default limit (16 here); the engine named no field
        ({"min_tokens": 5, "max_tokens": 4}, "min_tokens"),
        ({"stop": ["ok", ""]}, "stop"),
        ({"stop": ""}, "stop"),
    ],
)
def test_what_the_engine_would_refuse_is_a_400_naming_its_field(fields, param):
    with pytest.raises(InvalidRequest) as exc:
        generation_request(_parse({"model": "small", "messages": [{"role": "user", "content": "x"}], **fields}), 16)
    assert exc.value.param == param
    assert to_api_error(exc.value).status_code == 400


@pytest.mark.parametrize("seed", [-(2**63), -1, 0, 2**63 - 1, 2**64 - 1])
def test_every_seed_the_engine_takes_is_accepted(seed):
    req = generation_request(
        _parse({"model": "small", "messages": [{"role": "user", "content": "x"}], "seed": seed}), 16
    )
    assert req.params.seed == seed
