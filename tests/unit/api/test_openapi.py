"""The OpenAPI document and the HTTP edge it describes, through the real `create_app` without engines: every API
operation is in it with its body and its errors in OpenAI's shape, and inputs that used to reach a 500 are 400s."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import UTC, datetime

import pytest

from api.routes.usage import _when
from config.settings import Settings
from serving.errors import InvalidRequest
from tenancy.directory import Directory
from tests.dbs import migrated
from tests.light_app import light_client

ADMIN_KEY = "sk-unit-admin"
SECRET = "unit-secret"
DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.fixture
def db(tmp_path):
    yield from migrated("sqlite", tmp_path)


@pytest.fixture
def directory(db):
    return Directory(db, SECRET)


@contextmanager
def _serve(tmp_path, db, directory):
    settings = Settings(data_dir=tmp_path, key_secret=SECRET, admin_key=ADMIN_KEY, demo_tenant=None)
    with light_client(settings, db, directory) as test_client:
        yield test_client


@pytest.fixture
def client(tmp_path, db, directory):
    with _serve(tmp_path, db, directory) as test_client:
        yield test_client


@pytest.fixture(params=["sqlite", "postgresql"])
def on_each_database(request, tmp_path):
    """A client over each database the server runs on, and its directory."""
    for db in migrated(request.param, tmp_path):
        directory = Directory(db, SECRET)
        with _serve(tmp_path, db, directory) as test_client:
            yield test_client, directory


@pytest.fixture
def document(client):
    response = client.get("/schema/openapi.json")
    assert response.status_code == 200
    return response.json()


def _operations(document):
    return {
        f"{method.upper()} {path}": operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if isinstance(operation, dict) and "responses" in operation
    }


def test_the_document_has_the_api_and_not_the_console(document):
    labels = set(_operations(document))
    assert {"POST /v1/chat/completions", "POST /v1/responses", "GET /v1/models", "GET /admin/tenants"} <= labels
    assert not [label for label in labels if " /console" in label or " /static" in label]


@pytest.mark.parametrize(
    ("label", "body"),
    [("POST /v1/chat/completions", "ChatCompletionRequest"), ("POST /v1/responses", "ResponsesRequest")],
)
def test_the_openai_routes_document_their_bodies_and_both_answers(document, label, body):
    operation = _operations(document)[label]
    assert operation["requestBody"]["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{body}"}
    assert set(operation["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    assert operation["security"] == [{"bearer": []}]
    assert {"400", "401", "404", "429", "503"} <= set(operation["responses"])


def test_every_documented_error_has_openais_shape(document):
    """Litestar documents its own validation-error body by default; Tessera answers in OpenAI's shape."""
    for label, operation in _operations(document).items():
        for status, response in operation["responses"].items():
            if status.startswith("4"):
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, (label, status)


def test_the_documented_limits_are_the_enforced_ones(document):
    schemas = document["components"]["schemas"]
    seed = schemas["ChatCompletionRequest"]["properties"]["seed"]
    assert (seed["minimum"], seed["maximum"]) == (-(2**63), 2**64 - 1)
    assert schemas["TenantIn"]["properties"]["tokens_per_minute"]["maximum"] == 10**18
    assert schemas["PriceIn"]["properties"]["micros_per_million"]["maximum"] == 10**18


def test_a_missing_key_is_a_401_before_the_body_is_read(client):
    response = client.post("/v1/chat/completions", content=b"{not json")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


def test_the_chat_body_is_read_by_tessera_s_parser(client):
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    response = client.post("/v1/chat/completions", content=DEEP, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


@pytest.mark.parametrize(
    ("method", "path", "body", "param"),
    [
        # Each was a 500: a RecursionError in the JSON decoder, or an integer SQLite cannot store.
        ("POST", "/admin/tenants", DEEP, None),
        ("POST", "/admin/tenants", b'{"name": "t", "tokens_per_minute": 1e30}', None),
        ("POST", "/admin/tenants", b'{"name": "t", "monthly_token_budget": 10000000000000000000}', None),
        ("POST", "/admin/tenants", b'{"name": "t", "concurrent_requests": 9223372036854775808}', None),
        ("PUT", "/admin/prices/small/output", b'{"micros_per_million": 9223372036854775808}', "micros_per_million"),
    ],
    ids=["nested-too-deeply", "huge-rate", "huge-budget", "huge-concurrency", "huge-price"],
)
def test_admin_bodies_that_reached_a_500_are_400s(client, method, path, body, param):
    response = client.request(method, path, content=body, headers={**ADMIN, "content-type": "application/json"})
    assert response.status_code == 400, response.text
    if param:
        assert response.json()["error"]["param"] == param


def test_a_key_expiry_past_year_9999_in_utc_is_a_400(client, directory):
    tenant = directory.create_tenant("acme")
    body = {"expires_at": "9999-12-31T23:59:59-23:59"}  # was a 500: it overflowed on its way to UTC
    response = client.post(f"/admin/tenants/{tenant.id}/keys", json=body, headers=ADMIN)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "expires_at"


@pytest.mark.parametrize("value", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59"])
def test_usage_bounds_past_the_calendar_in_utc_are_400s(value):
    with pytest.raises(InvalidRequest) as caught:  # were 500s: they overflowed when the database compared them
        _when(value, datetime.now(UTC), "start")
    assert caught.value.param == "start"


def test_usage_bounds_are_compared_in_utc():
    assert _when("2026-01-01T02:00:00+02:00", datetime.now(UTC), "end") == datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("method", "path", "body", "param"),
    [
        ("PUT", "/admin/prices/small/tokens", {"micros_per_million": 1}, "dimension"),
        ("PATCH", "/admin/tenants/any", {"status": "paused"}, "status"),
    ],
)
def test_the_documented_choices_are_enforced_by_name(client, document, method, path, body, param):
    response = client.request(method, path, json=body, headers=ADMIN)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_the_choices_are_in_the_document(document):
    prices = _operations(document)["PUT /admin/prices/{model}/{dimension}"]
    dimension = next(p for p in prices["parameters"] if p["name"] == "dimension")
    assert dimension["schema"]["pattern"] == (
        "^(text_input|image|audio|cached_media|output|audio_seconds|cached_audio_seconds|batch_percent)$"
    )
    assert document["components"]["schemas"]["TenantPatch"]["properties"]["status"]["enum"] == ["active", "suspended"]


@pytest.mark.parametrize(
    ("method", "path", "body", "param"),
    [
        # Each was a 500 on PostgreSQL, whose text cannot hold NUL (0x00).
        ("GET", "/v1/usage/%00", None, "request_id"),
        ("GET", "/admin/tenants/%00/keys", None, "tenant_id"),
        ("POST", "/admin/keys/k%00/revoke", None, "key_id"),
        ("POST", "/admin/tenants", {"name": "a\u0000b"}, "name"),
        ("POST", "/admin/tenants/{tenant}/keys", {"allowed_models": ["small\u0000"]}, "allowed_models.0"),
        ("PUT", "/admin/tenants/{tenant}/quota", {"tier": "\u0000"}, "tier"),
    ],
)
def test_text_with_a_nul_is_a_400_on_every_database(on_each_database, method, path, body, param):
    client, directory = on_each_database
    path = path.format(tenant=directory.create_tenant("acme").id)
    response = client.request(method, path, json=body, headers=ADMIN)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
