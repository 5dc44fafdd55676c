"""Schemathesis against the live server's own OpenAPI document: no generated input, valid or not, gets a 5xx that the
document does not declare (503, where an engine can be unavailable), and every answer's status, content type and
body is one the document promises.

Bounded for CI: a fixed number of derandomized examples per operation and mode, a timeout on every request, and
requests that generate text capped to a few tokens and choices, so that the engines are never the bottleneck.

Schemathesis' own pytest loader for a fixture-provided schema does not run under pytest 9 (it sets
`Node._nodeid`, which pytest 9 removed), so each operation runs its cases through Hypothesis directly.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode, checks

from tests.conftest import ADMIN_KEY, API_KEY

# Every operation in the document, fuzzed; `test_the_document_lists_exactly_these` keeps the list honest.
OPERATIONS = [
    "POST /v1/chat/completions",
    "POST /v1/embeddings",
    "POST /v1/audio/transcriptions",
    "POST /v1/audio/translations",
    "POST /v1/responses",
    "GET /v1/responses/{response_id}",
    "DELETE /v1/responses/{response_id}",
    "GET /v1/responses/{response_id}/input_items",
    "POST /v1/responses/{response_id}/cancel",
    "POST /v1/conversations",
    "GET /v1/conversations/{conversation_id}",
    "POST /v1/conversations/{conversation_id}",
    "DELETE /v1/conversations/{conversation_id}",
    "GET /v1/conversations/{conversation_id}/items",
    "POST /v1/conversations/{conversation_id}/items",
    "GET /v1/conversations/{conversation_id}/items/{item_id}",
    "DELETE /v1/conversations/{conversation_id}/items/{item_id}",
    "POST /v1/files",
    "GET /v1/files",
    "GET /v1/files/{file_id}",
    "GET /v1/files/{file_id}/content",
    "DELETE /v1/files/{file_id}",
    "POST /v1/batches",
    "GET /v1/batches",
    "GET /v1/batches/{batch_id}",
    "POST /v1/batches/{batch_id}/cancel",
    "GET /v1/models",
    "GET /v1/models/{model_id}",
    "GET /v1/usage",
    "GET /v1/usage/{request_id}",
    "GET /admin/tenants",
    "POST /admin/tenants",
    "PATCH /admin/tenants/{tenant_id}",
    "PUT /admin/tenants/{tenant_id}/quota",
    "GET /admin/tenants/{tenant_id}/keys",
    "POST /admin/tenants/{tenant_id}/keys",
    "POST /admin/keys/{key_id}/revoke",
    "GET /admin/prices",
    "PUT /admin/prices/{model}/{dimension}",
    "GET /admin/billing/dead-letters",
    "GET /admin/audit",
    "POST /v1/billing/webhooks/stripe",
    "GET /health",
    "GET /metrics",
]
MAX_EXAMPLES = 25  # per operation and generation mode
REQUEST_TIMEOUT_S = 60  # a request slower than this fails its example; none should come near it
SERVED_MODEL = "small"
MAX_TOKENS = 4
MAX_CHOICES = 2
TOKEN_LIMITS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
GENERATING = {"/v1/chat/completions": "max_tokens", "/v1/responses": "max_output_tokens"}
EMBEDDING_MODEL = "minilm"
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(value: Any) -> str:
    return value if isinstance(value, str) and value.strip() else "hi"


def steer(body: Any, path: str, positive: bool) -> Any:
    """A generated body for an endpoint that generates text, aimed at a served model (a random name only ever
    reaches the 404) and capped to a few tokens and choices. A positive case also gets one well-formed user turn
    (keeping the generated text), so that its other generated parameters reach the engine instead of stopping at
    the first message check: a schema cannot say that a tool turn needs `tool_call_id`. Anything else, valid or
    not, is sent as generated."""
    if not isinstance(body, dict):
        return body
    body = dict(body)
    if isinstance(body.get("model"), str):
        body["model"] = SERVED_MODEL
    for name in TOKEN_LIMITS:
        if _number(body.get(name)) and body[name] > MAX_TOKENS:
            body[name] = MAX_TOKENS
    if all(body.get(name) is None for name in TOKEN_LIMITS):
        body[GENERATING[path]] = MAX_TOKENS  # the server's default, 256 tokens, would dominate the run
    if _number(body.get("n")) and body["n"] > MAX_CHOICES:
        body["n"] = MAX_CHOICES
    if positive and path == "/v1/chat/completions" and isinstance(body.get("messages"), list):
        first = body["messages"][0] if body["messages"] else None
        body["messages"] = [
            {"role": "user", "content": _text(first.get("content") if isinstance(first, dict) else None)}
        ]
    elif positive and path == "/v1/responses":
        body["input"] = _text(body.get("input"))
    return body


@pytest.fixture(scope="module")
def api_schema(server):
    config = schemathesis.Config.from_dict(
        {
            "request-timeout": REQUEST_TIMEOUT_S,
            # An engine that cannot serve now answers 503, which the generating operations declare;
            # status_code_conformance holds every other operation to its own list.
            "checks": {"not_a_server_error": {"expected-statuses": ["2XX", "3XX", "4XX", "503"]}},
        }
    )
    schema = schemathesis.openapi.from_url(server.base_url + "/schema/openapi.json", config=config)

    @schema.hook
    def map_case(context, case):
        if case.path in GENERATING:
            case.body = steer(case.body, case.path, case.meta.generation.mode == GenerationMode.POSITIVE)
        elif case.path == "/v1/embeddings" and isinstance(case.body, dict) and isinstance(case.body.get("model"), str):
            case.body = {**case.body, "model": EMBEDDING_MODEL}  # a random name only ever reaches the 404
        return case

    return schema


def test_the_document_lists_exactly_these(api_schema):
    listed = sorted(result.ok().label for result in api_schema.get_all_operations())
    assert listed == sorted(OPERATIONS)


def _run(operation, mode: GenerationMode) -> int:
    key = ADMIN_KEY if operation.path.startswith("/admin") else API_KEY
    sent = 0

    @given(case=operation.as_strategy(mode))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,  # bounded per request instead (REQUEST_TIMEOUT_S): these machines are shared
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case):
        nonlocal sent
        sent += 1
        case.call_and_validate(headers={"authorization": f"Bearer {key}"}, checks=CHECKS, timeout=REQUEST_TIMEOUT_S)

    fuzz()
    return sent


@pytest.mark.timeout(120)  # one operation takes seconds; a hang fails here, not at the suite's limit
@pytest.mark.parametrize("label", OPERATIONS)
def test_operation_keeps_to_the_document(api_schema, label):
    method, path = label.split(" ", 1)
    operation = api_schema[path][method]
    assert _run(operation, GenerationMode.POSITIVE) >= 1
    with contextlib.suppress(Unsatisfiable):  # raised where nothing in the input can be made invalid
        _run(operation, GenerationMode.NEGATIVE)
