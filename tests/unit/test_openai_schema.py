"""The schema validator the end-to-end tests rely on: OpenAI's own examples pass, and each kind of break fails."""

from __future__ import annotations

import copy
import json

import pytest
from jsonschema import Draft202012Validator

from tests.openai_schema import CHUNK, COMPLETION, ERROR, assert_valid, load_document, to_json_schema, violations


def _example(name: str) -> str:
    return load_document()["components"]["schemas"][name]["x-oaiMeta"]["example"]


COMPLETION_BODY = json.loads(_example(COMPLETION))
FIRST_CHUNK, NEXT_CHUNK, LAST_CHUNK = (json.loads(part) for part in _example(CHUNK).split("\n\n") if part != "....")
USAGE_CHUNK = {
    "id": "chatcmpl-123",
    "object": "chat.completion.chunk",
    "created": 1694268190,
    "model": "gpt-4o-mini",
    "choices": [],
    "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
}
ERROR_BODY = {"error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": "invalid_value"}}


def _changed(body: dict, path: str, value=None, *, delete: bool = False) -> dict:
    """A deep copy of `body` with the dotted `path` (list indices as numbers) set to `value`, or deleted."""
    out = copy.deepcopy(body)
    *parents, last = (int(k) if k.isdigit() else k for k in path.split("."))
    node = out
    for key in parents:
        node = node[key]
    if delete:
        del node[last]
    else:
        node[last] = value
    return out


def test_the_converted_document_is_valid_json_schema():
    for schema in load_document()["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize(
    ("body", "schema"),
    [
        (COMPLETION_BODY, COMPLETION),
        (FIRST_CHUNK, CHUNK),
        (NEXT_CHUNK, CHUNK),
        (LAST_CHUNK, CHUNK),
        (USAGE_CHUNK, CHUNK),
        (ERROR_BODY, ERROR),
    ],
    ids=["completion", "first-chunk", "next-chunk", "last-chunk", "usage-chunk", "error"],
)
def test_openais_own_examples_conform(body, schema):
    assert_valid(body, schema)


@pytest.mark.parametrize(
    ("body", "schema"),
    [
        (_changed(COMPLETION_BODY, "choices.0.message.refusal", None), COMPLETION),
        (_changed(COMPLETION_BODY, "choices.0.message.content", None), COMPLETION),
        (_changed(COMPLETION_BODY, "choices.0.logprobs", {"content": None, "refusal": None}), COMPLETION),
        (_changed(NEXT_CHUNK, "usage", None), CHUNK),  # every chunk but the last, with include_usage
        (_changed(NEXT_CHUNK, "choices.0.logprobs", None, delete=True), CHUNK),
        (_changed(NEXT_CHUNK, "choices.0.delta.content", None), CHUNK),
        (_changed(COMPLETION_BODY, "prompt_token_ids", [1, 2]), COMPLETION),  # extensions are allowed
    ],
    ids=["null-refusal", "null-content", "logprobs-object", "null-usage", "no-logprobs", "null-delta-content", "extra"],
)
def test_what_openai_allows_passes(body, schema):
    assert violations(body, schema) == []


@pytest.mark.parametrize(
    ("body", "schema", "expected"),
    [
        (
            _changed(COMPLETION_BODY, "choices.0.message.refusal", delete=True),
            COMPLETION,
            "$.choices[0].message: 'refusal' is a required property",
        ),
        (
            _changed(NEXT_CHUNK, "choices.0.delta.role", None),
            CHUNK,
            "$.choices[0].delta.role: None is not of type 'string'",
        ),
        (_changed(COMPLETION_BODY, "created", "1741570283"), COMPLETION, "$.created: '1741570283' is not of type"),
        (_changed(COMPLETION_BODY, "choices.0.logprobs", delete=True), COMPLETION, "'logprobs' is a required property"),
        (_changed(COMPLETION_BODY, "choices.0.finish_reason", None), COMPLETION, "$.choices[0].finish_reason: None"),
        (_changed(NEXT_CHUNK, "choices.0.finish_reason", "abort"), CHUNK, "'abort' is not one of"),
        (_changed(NEXT_CHUNK, "object", "chat.completion"), CHUNK, "$.object: 'chat.completion' is not one of"),
        (
            _changed(USAGE_CHUNK, "usage.total_tokens", None),
            CHUNK,
            "(closest: $.usage.total_tokens: None is not of type 'integer')",
        ),
        (_changed(ERROR_BODY, "error.param", delete=True), ERROR, "$.error: 'param' is a required property"),
        ({"detail": "Not Found"}, ERROR, "'error' is a required property"),
    ],
    ids=[
        "missing-refusal",
        "null-role",
        "string-created",
        "missing-logprobs",
        "null-finish-reason-in-a-completion",
        "unknown-finish-reason",
        "wrong-object",
        "bad-usage",
        "error-without-param",
        "not-an-error",
    ],
)
def test_each_break_is_reported(body, schema, expected):
    found = violations(body, schema)
    assert any(expected in line for line in found), found
    with pytest.raises(AssertionError, match="not a valid"):
        assert_valid(body, schema)


def test_nullable_conversion():
    assert to_json_schema({"type": "string", "enum": ["a"], "nullable": True}) == {
        "type": ["string", "null"],
        "enum": ["a", None],
    }
    assert to_json_schema({"$ref": "#/x", "nullable": True, "description": "d"}) == {
        "anyOf": [{"$ref": "#/x"}, {"type": "null"}],
        "description": "d",
    }
    assert to_json_schema({"allOf": [{"$ref": "#/x"}], "nullable": True}) == {
        "anyOf": [{"allOf": [{"$ref": "#/x"}]}, {"type": "null"}]
    }
    # Nested schemas are converted; a property that happens to be called "nullable" is left alone.
    nested = {
        "type": "object",
        "properties": {"nullable": {"type": "boolean"}, "a": {"type": "integer", "nullable": True}},
    }
    assert to_json_schema(nested)["properties"] == {"nullable": {"type": "boolean"}, "a": {"type": ["integer", "null"]}}
    assert to_json_schema({"type": "string", "nullable": False}) == {"type": "string"}


def test_an_unknown_schema_name_is_refused():
    with pytest.raises(KeyError):
        violations({}, "CreateChatCompletionResponses")
