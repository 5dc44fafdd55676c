"""Batch lines against a tenant's quotas on the live server: they are billed at the model's batch share of the
prices, are not held to the tokens-per-minute or concurrency limits (a tenant whose limits would refuse every line
interactively still gets its batch done), and a batch whose tenant runs out of monthly budget stops, the lines left
failed as `insufficient_quota`."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.admin import new_tenant
from tests.integration.test_batches import CHAT, _jsonl, _line, _until_ended, _upload
from tests.openai_wire import openai_client


def _receipt(server, key: str, request_id: str) -> dict:
    got = httpx.get(f"{server.v1}/usage/{request_id}", headers={"authorization": f"Bearer {key}"})
    assert got.status_code == 200, got.text
    return got.json()


def test_batch_lines_skip_the_rate_limits_and_pay_the_batch_share(server):
    key = new_tenant(server, "batch-rates", concurrent_requests=1, tokens_per_minute=1)
    client = openai_client(server.v1, key, timeout=60)
    with pytest.raises(openai.RateLimitError):  # interactively this tenant can run nothing
        client.chat.completions.create(
            model="small", max_tokens=4, temperature=0, messages=[{"role": "user", "content": "Say hello."}]
        )
    lines = [_line(f"l{n}", "Say hello.") for n in range(3)]
    done = _until_ended(
        client, client.batches.create(input_file_id=_upload(client, lines), endpoint=CHAT, completion_window="24h").id
    )
    assert (done.status, done.request_counts.completed, done.request_counts.failed) == ("completed", 3, 0)
    output = _jsonl(client, done.output_file_id)
    batch_receipt = _receipt(server, key, output[0]["response"]["request_id"])
    assert batch_receipt["priority"] == "batch"

    roomy = new_tenant(server, "batch-price")
    answer = openai_client(server.v1, roomy, timeout=60).chat.completions.create(
        model="small", max_tokens=4, temperature=0, messages=[{"role": "user", "content": "Say hello."}]
    )
    interactive = _receipt(server, roomy, answer.id)
    assert interactive["priority"] == "interactive"
    assert interactive["tokens"]["text"] == batch_receipt["tokens"]["text"]
    assert interactive["tokens"]["output"] == batch_receipt["tokens"]["output"]
    assert interactive["cost_micros"] > 0
    # The default batch share is 50%; both are rounded down to whole micros.
    assert abs(2 * batch_receipt["cost_micros"] - interactive["cost_micros"]) <= 2


def test_a_batch_stops_when_its_tenant_runs_out_of_monthly_budget(server):
    key = new_tenant(server, "batch-budget", monthly_token_budget=150)
    client = openai_client(server.v1, key, timeout=60)
    lines = [_line(f"b{n}", "Say hello.", max_tokens=16) for n in range(12)]
    done = _until_ended(
        client, client.batches.create(input_file_id=_upload(client, lines), endpoint=CHAT, completion_window="24h").id
    )
    assert done.status == "completed"
    output, errors = _jsonl(client, done.output_file_id), _jsonl(client, done.error_file_id)
    assert sorted(r["custom_id"] for r in output + errors) == sorted(line["custom_id"] for line in lines)
    assert output, "the budget covers some lines"
    assert errors, "but not twelve"
    codes = {(r["error"] or r["response"]["body"]["error"])["code"] for r in errors}
    assert codes == {"insufficient_quota"}
    assert done.request_counts.failed == len(errors)
