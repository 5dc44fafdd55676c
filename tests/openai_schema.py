"""OpenAI's published chat-completion schemas as JSON Schema validators: which fields a body must have, and their types.

The schemas are OpenAI's OpenAPI 3.0 components (tests/data/openai-chat-schemas.json, see tests/data/README.md).
OpenAPI 3.0 is not quite JSON Schema, so the document is converted once before use:
- `nullable: true` allows null. Beside a `$ref` it becomes `anyOf: [{$ref}, {type: null}]` (in 3.0 a `$ref`'s
  siblings are otherwise ignored); beside `type` it adds "null" to the type and null to any `enum` (OpenAI marks
  `finish_reason` nullable and lists only strings: null is what it sends on every chunk but the last).
- `#/components/schemas/...` references resolve against the document itself, through a `referencing` registry.
Everything else in the file (`description`, `discriminator`, `x-*`, `format`) is annotation and is left as is.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry
from referencing.jsonschema import DRAFT202012

SCHEMA_FILE = Path(__file__).parent / "data" / "openai-chat-schemas.json"
DOCUMENT_URI = "urn:openai:openapi"

COMPLETION = "CreateChatCompletionResponse"
CHUNK = "CreateChatCompletionStreamResponse"
ERROR = "ErrorResponse"

# Keywords whose value is one schema, a list of schemas, or a map of name to schema.
_ONE = ("items", "additionalProperties", "not")
_LIST = ("anyOf", "oneOf", "allOf")
_MAP = ("properties",)
_NULL = {"type": "null"}


def to_json_schema(node: Any) -> Any:
    """One OpenAPI 3.0 schema object as a JSON Schema (2020-12) one; other values come back unchanged."""
    if not isinstance(node, dict):
        return node
    out = dict(node)
    for key in _ONE:
        if key in out:
            out[key] = to_json_schema(out[key])
    for key in _LIST:
        if key in out:
            out[key] = [to_json_schema(s) for s in out[key]]
    for key in _MAP:
        if key in out:
            out[key] = {name: to_json_schema(s) for name, s in out[key].items()}
    if not out.pop("nullable", False):
        return out
    if "$ref" in out:
        return {"anyOf": [{"$ref": out.pop("$ref")}, _NULL], **out}
    if isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        return out
    return {"anyOf": [out, _NULL]}


def load_document(path: Path = SCHEMA_FILE) -> dict[str, Any]:
    """The OpenAPI document with every component schema converted."""
    document = json.loads(path.read_text())
    schemas = document["components"]["schemas"]
    return {**document, "components": {"schemas": {name: to_json_schema(s) for name, s in schemas.items()}}}


@cache
def _registry() -> Registry:
    return Registry().with_resource(DOCUMENT_URI, DRAFT202012.create_resource(load_document()))


@cache
def validator(name: str) -> Draft202012Validator:
    """A validator for the component schema `name`, e.g. COMPLETION, CHUNK or ERROR."""
    if name not in _registry().contents(DOCUMENT_URI)["components"]["schemas"]:
        raise KeyError(f"{name} is not a schema in {SCHEMA_FILE.name}")
    return Draft202012Validator({"$ref": f"{DOCUMENT_URI}#/components/schemas/{name}"}, registry=_registry())


def _describe(error: ValidationError) -> str:
    text = error.message
    # anyOf/oneOf: say why the closest alternative failed too; "is not null" says nothing about a nullable value.
    alternatives = [e for e in error.context or () if e.schema != _NULL]
    if alternatives:
        closest = best_match(alternatives)
        text += f" (closest: {closest.json_path}: {closest.message})"
    return text


def violations(body: Any, name: str) -> list[str]:
    """Every way `body` breaks the schema `name`, one line per offending place; empty when it conforms."""
    by_place: dict[str, list[str]] = {}
    for error in validator(name).iter_errors(body):
        by_place.setdefault(error.json_path, []).append(_describe(error))
    return [f"{place}: " + "; ".join(problems) for place, problems in sorted(by_place.items())]


def assert_valid(body: Any, name: str) -> None:
    found = violations(body, name)
    assert not found, f"not a valid {name}:\n  " + "\n  ".join(found) + f"\nbody: {json.dumps(body)[:2000]}"
