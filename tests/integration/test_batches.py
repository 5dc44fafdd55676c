"""The Batch API on the live server with the official SDK: upload a JSONL, create a batch, poll it, read its output
and error files. Lines carry text, an image and a clip; a line whose body the endpoint refuses lands in the error
file with its `custom_id`; a file with bad lines fails the batch naming each; cancelling ends every line once;
another tenant's batch is not found."""

from __future__ import annotations

import io
import json
import time

import httpx
import numpy as np
import openai
import pytest

from tests import media
from tests.admin import new_tenant
from tests.conftest import API_KEY
from tests.openai_wire import openai_client

CHAT = "/v1/chat/completions"


def _line(custom_id: str, content, url: str = CHAT, **body) -> dict:
    request = {"model": "small", "max_tokens": 4, "temperature": 0, **body}
    if url == CHAT:
        request["messages"] = [{"role": "user", "content": content}]
    else:
        request = {"model": "small", "max_output_tokens": 4, "input": content, **body}
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": request}


def _upload(client, lines: list[dict]) -> str:
    content = "".join(json.dumps(line) + "\n" for line in lines).encode()
    return client.files.create(file=("batch.jsonl", io.BytesIO(content)), purpose="batch").id


def _until_ended(client, batch_id: str, timeout_s: float = 300.0):
    deadline = time.monotonic() + timeout_s
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        assert time.monotonic() < deadline, f"{batch_id} still {batch.status}"
        time.sleep(0.5)


def _jsonl(client, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).read().decode().splitlines()]


def test_a_batch_round_trip_with_media_and_a_refused_line(server, client):
    image = [{"type": "image_url", "image_url": {"url": media.png_data_url(3)}}, {"type": "text", "text": "What?"}]
    audio = {"type": "input_audio", "input_audio": {"data": media.audio_b64(1.0), "format": "wav"}}
    lines = [
        _line("text", "Say hello."),
        _line("image", image),
        _line("audio", [audio, {"type": "text", "text": "What do you hear?"}]),
        _line("refused", "Too hot.", temperature=7),
    ]
    batch = client.batches.create(input_file_id=_upload(client, lines), endpoint=CHAT, completion_window="24h")
    assert batch.status == "validating"
    done = _until_ended(client, batch.id)
    assert done.status == "completed"
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (4, 3, 1)
    output, errors = _jsonl(client, done.output_file_id), _jsonl(client, done.error_file_id)
    assert sorted(o["custom_id"] for o in output) == ["audio", "image", "text"]
    for row in output:
        assert row["response"]["status_code"] == 200
        assert row["response"]["body"]["object"] == "chat.completion"
        receipt = httpx.get(
            f"{server.v1}/usage/{row['response']['request_id']}", headers={"authorization": f"Bearer {API_KEY}"}
        )
        assert receipt.status_code == 200, receipt.text  # metered as any request
    by_id = {o["custom_id"]: o["response"]["body"]["usage"]["prompt_tokens_details"] for o in output}
    assert by_id["image"]["image_tokens"] > 0
    assert by_id["audio"]["audio_tokens"] > 0
    (refused,) = errors
    assert refused["custom_id"] == "refused"
    assert refused["response"]["status_code"] == 400
    assert refused["response"]["body"]["error"]["param"] == "temperature"
    assert done.id in [b.id for b in client.batches.list()]


def test_a_responses_batch(client):
    lines = [_line("r1", "Say hi.", url="/v1/responses"), _line("r2", "Say bye.", url="/v1/responses")]
    batch = client.batches.create(
        input_file_id=_upload(client, lines), endpoint="/v1/responses", completion_window="24h"
    )
    done = _until_ended(client, batch.id)
    output = _jsonl(client, done.output_file_id)
    assert sorted(o["custom_id"] for o in output) == ["r1", "r2"]
    assert all(o["response"]["body"]["object"] == "response" for o in output)


def test_bad_lines_fail_the_batch_naming_each(client):
    content = (json.dumps(_line("a", "hi")) + "\n" + "not json\n" + json.dumps(_line("a", "again")) + "\n").encode()
    file_id = client.files.create(file=("bad.jsonl", io.BytesIO(content)), purpose="batch").id
    done = _until_ended(client, client.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h").id)
    assert done.status == "failed"
    assert [(e.line, e.code) for e in done.errors.data] == [(2, "invalid_json_line"), (3, "duplicate_custom_id")]
    assert done.output_file_id is None


def test_cancelling_ends_every_line_once(client):
    # About 3,800 tokens, so the cancel a second in lands mid-way (lines run several at once).
    lines = [_line(f"n{n}", f"Count to {n}.", max_tokens=32, ignore_eos=True) for n in range(120)]
    batch = client.batches.create(input_file_id=_upload(client, lines), endpoint=CHAT, completion_window="24h")
    time.sleep(1.0)
    assert client.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    done = _until_ended(client, batch.id)
    assert done.status == "cancelled"
    output, errors = _jsonl(client, done.output_file_id), _jsonl(client, done.error_file_id)
    seen = [row["custom_id"] for row in output + errors]
    assert sorted(seen) == sorted(line["custom_id"] for line in lines)  # every line once, in one file or the other
    assert any(row["error"] and row["error"]["code"] == "batch_cancelled" for row in errors)


def test_another_tenants_batch_and_a_missing_file(server, client):
    batch = client.batches.create(
        input_file_id=_upload(client, [_line("x", "hi")]), endpoint=CHAT, completion_window="24h"
    )
    other = openai_client(server.v1, new_tenant(server, "batch"), timeout=60)
    with pytest.raises(openai.NotFoundError):
        other.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        other.batches.cancel(batch.id)
    with pytest.raises(openai.NotFoundError) as exc:
        other.batches.create(input_file_id=batch.input_file_id, endpoint=CHAT, completion_window="24h")
    assert exc.value.body["param"] == "input_file_id"
    _until_ended(client, batch.id)


def test_an_embeddings_batch_matches_the_live_endpoint_and_bills_at_the_batch_price(server, client):
    texts = ["A red circle on the left.", "The meeting is on Thursday."]
    lines = [
        {"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings", "body": {"model": "minilm", "input": t}}
        for i, t in enumerate(texts)
    ]
    lines.append(
        {
            "custom_id": "dims",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": "minilm", "input": "x", "dimensions": 7},
        }
    )
    lines.append(
        {"custom_id": "kind", "method": "POST", "url": "/v1/embeddings", "body": {"model": "large", "input": "x"}}
    )
    batch = client.batches.create(
        input_file_id=_upload(client, lines), endpoint="/v1/embeddings", completion_window="24h"
    )
    done = _until_ended(client, batch.id)
    assert (done.status, done.request_counts.completed, done.request_counts.failed) == ("completed", 2, 2)
    output = {o["custom_id"]: o["response"] for o in _jsonl(client, done.output_file_id)}
    live = client.embeddings.create(model="minilm", input=texts, encoding_format="float")
    for i, row in enumerate(live.data):
        body = output[f"e{i}"]["body"]
        assert body["object"] == "list"
        assert body["usage"]["prompt_tokens"] > 0
        got = np.array(body["data"][0]["embedding"])
        assert float(got @ np.array(row.embedding)) > 0.9999  # unit vectors: the same embedding
        receipt = httpx.get(
            f"{server.v1}/usage/{output[f'e{i}']['request_id']}", headers={"authorization": f"Bearer {API_KEY}"}
        )
        assert receipt.status_code == 200, receipt.text
        assert receipt.json()["endpoint"] == "embeddings"
        assert receipt.json()["priority"] == "batch", receipt.json()
    errors = {e["custom_id"]: e["response"] for e in _jsonl(client, done.error_file_id)}
    assert errors["dims"]["status_code"] == 400
    assert errors["dims"]["body"]["error"]["param"] == "dimensions"
    assert errors["kind"]["body"]["error"]["code"] == "wrong_model_kind"
