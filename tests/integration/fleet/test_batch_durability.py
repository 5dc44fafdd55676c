"""A batch on two gateways sharing PostgreSQL and a files volume, in front of the fleet's replicas: its turns go to
either gateway, each line runs once; the gateway running it is killed with -9 mid-batch and started again, and the
batch still completes with every `custom_id` exactly once in its output, no line billed twice, and no line whose
result was committed before the crash run again."""

from __future__ import annotations

import io
import json
import os
import signal
import time
from collections import Counter

import openai
import pytest
from sqlmodel import Session, col, select

from bench.common import png_data_url
from db.models import BatchLine, BillingOutbox, GatewayInstance, InferenceRequest
from tests.conftest import API_KEY, run_server
from tests.dbs import migrated
from tests.integration.fleet.conftest import _gateway_env

LINES = 48


@pytest.fixture
def own_db(tmp_path):
    """A database of this test's own, so the fleet's package gateways never claim its batch."""
    yield from migrated("postgresql", tmp_path)


def _lines() -> bytes:
    rows = []
    for n in range(LINES):
        content: object = f"Count to {n % 7 + 2}."
        if n % 8 == 0:
            content = [
                {"type": "image_url", "image_url": {"url": png_data_url(7000 + n)}},
                {"type": "text", "text": "What is in the picture?"},
            ]
        body = {
            "model": "small",
            "max_tokens": 16,
            "temperature": 0,
            "messages": [{"role": "user", "content": content}],
        }
        rows.append({"custom_id": f"line-{n}", "method": "POST", "url": "/v1/chat/completions", "body": body})
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _gateway(replicas, url, shared, tmp_path_factory, name):
    data = tmp_path_factory.mktemp(name)
    env = {
        **_gateway_env(replicas, url, data, shared, flush=False),
        "TESSERA_JOB_LEASE_S": "3",
        "TESSERA_JOB_POLL_S": "0.2",
        "TESSERA_BATCH_TURN_S": "2",
        "TESSERA_BATCH_CONCURRENCY": "4",
    }
    return run_server(env, data / "server.log")


def _holder(db, batch_id: str) -> int | None:
    """The pid of the gateway that has a line of the batch running right now."""
    with Session(db) as s:
        owners = s.exec(
            select(InferenceRequest.owner).where(
                InferenceRequest.status == "running", InferenceRequest.priority == "batch"
            )
        ).all()
        for owner in owners:
            instance = s.get(GatewayInstance, owner)
            if instance is not None:
                return instance.pid
    return None


def test_a_gateway_killed_mid_batch_loses_no_line_and_bills_none_twice(replicas, own_db, tmp_path_factory):
    url = own_db.url.render_as_string(hide_password=False)
    shared = tmp_path_factory.mktemp("batch-volume")
    first_run = _gateway(replicas, url, shared, tmp_path_factory, "batch-a")
    a = next(first_run)
    second_run = _gateway(replicas, url, shared, tmp_path_factory, "batch-b")
    b = next(second_run)
    restarted_run = None
    try:
        client = openai.OpenAI(base_url=a.v1, api_key=API_KEY, timeout=60, max_retries=0)
        upload = client.files.create(file=("lines.jsonl", io.BytesIO(_lines())), purpose="batch")
        batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
        via_b = openai.OpenAI(base_url=b.v1, api_key=API_KEY, timeout=60, max_retries=0)
        assert via_b.files.retrieve(upload.id).bytes == upload.bytes  # the volume is shared

        deadline, victim = time.monotonic() + 240, None
        while victim is None:
            assert time.monotonic() < deadline, "the batch never got going"
            done = client.batches.retrieve(batch.id).request_counts
            if done is not None and done.completed >= 8:
                victim = _holder(own_db, batch.id)
            time.sleep(0.1)
        with Session(own_db) as s:
            before = {
                r.line: r.result["id"]
                for r in s.exec(select(BatchLine).where(BatchLine.batch_id == batch.id, col(BatchLine.ok).is_not(None)))
            }
        os.kill(victim, signal.SIGKILL)
        killed, survivor = (a, b) if victim == a.proc.pid else (b, a)
        killed.proc.wait(timeout=30)
        restarted_run = _gateway(replicas, url, shared, tmp_path_factory, "batch-restarted")
        next(restarted_run)

        reader = openai.OpenAI(base_url=survivor.v1, api_key=API_KEY, timeout=60, max_retries=0)
        deadline = time.monotonic() + 400
        while (current := reader.batches.retrieve(batch.id)).status not in ("completed", "failed", "cancelled"):
            assert time.monotonic() < deadline, f"batch still {current.status}: {current.request_counts}"
            time.sleep(0.5)
        assert current.status == "completed", current.errors
        output = [json.loads(x) for x in reader.files.content(current.output_file_id).read().decode().splitlines()]
        errors = []
        if current.error_file_id:
            errors = [json.loads(x) for x in reader.files.content(current.error_file_id).read().decode().splitlines()]
        seen = Counter(r["custom_id"] for r in output + errors)
        assert seen == Counter(f"line-{n}" for n in range(LINES))  # each exactly once
        assert errors == [], errors

        with Session(own_db) as s:
            rows = list(s.exec(select(InferenceRequest).where(InferenceRequest.priority == "batch")))
            outbox = list(s.exec(select(BillingOutbox)))
            after = {r.line: r.result["id"] for r in s.exec(select(BatchLine).where(BatchLine.batch_id == batch.id))}
        ids = {r["response"]["request_id"] for r in output}
        assert len(ids) == LINES
        assert {r.request_id for r in rows} == ids  # one usage row per line, whichever gateway ran it
        assert all(r.status == "completed" for r in rows), Counter(r.status for r in rows)
        per_line = Counter((o.request_id, o.dimension) for o in outbox)
        assert max(per_line.values()) == 1  # nothing billed twice
        assert {o.request_id for o in outbox} == ids
        assert all(o.dimension.startswith("batch_") for o in outbox)
        assert all(after[line] == result for line, result in before.items())  # committed lines never ran again
        assert len(before) >= 8
    finally:
        for run in (first_run, second_run, restarted_run):
            if run is not None:
                run.close()
