"""`/v1/files` on the live server with the official SDK: upload, list, retrieve, content, delete; another tenant's
file is not found, a purpose other than `batch` is a 400 naming it, and a file over the limit is a 413."""

from __future__ import annotations

import io

import httpx
import openai
import pytest

from tests.admin import new_tenant
from tests.conftest import API_KEY
from tests.openai_wire import openai_client

LINES = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'


def test_a_file_round_trip(client):
    made = client.files.create(file=("in.jsonl", io.BytesIO(LINES)), purpose="batch")
    assert (made.object, made.bytes, made.filename, made.purpose, made.status) == (
        "file", len(LINES), "in.jsonl", "batch", "processed",
    )  # fmt: skip
    assert made.expires_at > made.created_at
    assert client.files.retrieve(made.id).id == made.id
    assert client.files.content(made.id).read() == LINES
    assert made.id in [f.id for f in client.files.list(purpose="batch")]
    deleted = client.files.delete(made.id)
    assert (deleted.id, deleted.deleted) == (made.id, True)
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(made.id)


def test_another_tenants_file_is_not_found(server, client):
    made = client.files.create(file=("mine.jsonl", io.BytesIO(LINES)), purpose="batch")
    other = openai_client(server.v1, new_tenant(server, "files"), timeout=60)
    for call in (other.files.retrieve, other.files.content, other.files.delete):
        with pytest.raises(openai.NotFoundError):
            call(made.id)
    assert made.id not in [f.id for f in other.files.list()]


def test_a_purpose_other_than_batch_is_refused(client):
    with pytest.raises(openai.BadRequestError) as exc:
        client.files.create(file=("x.jsonl", io.BytesIO(LINES)), purpose="fine-tune")
    assert exc.value.body["param"] == "purpose"


def test_a_file_over_the_limit_is_a_413(server):
    # the shared server's limit is the default, 100 MiB: one byte more is refused before it is kept
    too_big = io.BytesIO(b"x" * (100 * 1024 * 1024 + 1))
    resp = httpx.post(
        f"{server.v1}/files",
        headers={"authorization": f"Bearer {API_KEY}"},
        files={"file": ("big.jsonl", too_big)},
        data={"purpose": "batch"},
        timeout=120,
    )
    assert resp.status_code == 413, resp.text
    assert resp.json()["error"]["type"] == "invalid_request_error"
