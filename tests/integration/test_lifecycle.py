"""Disconnects abort engine work, metrics report what happened, and a dead engine is reported, not hidden."""

from __future__ import annotations

import http.client
import re
import signal
import time

import httpx
import psutil
import pytest

from tests import openai_wire
from tests.conftest import API_KEY

HEADERS = {"authorization": f"Bearer {API_KEY}"}


def _health(server):
    return httpx.get(server.base_url + "/health", timeout=30)


def _wait_for(predicate, timeout_s=30.0, interval_s=0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return False


def _metric(server, name, **labels):
    text = httpx.get(server.base_url + "/metrics", timeout=30).text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_client_disconnect_aborts_the_engine_request(server):
    cancelled_before = _metric(server, "tessera_requests_total", model="small", status="cancelled")
    body = {
        "model": "small",
        "messages": [{"role": "user", "content": "Write forever."}],
        "max_tokens": 3500,
        "ignore_eos": True,
        "stream": True,
    }
    seen: list[str] = []
    with (
        openai_wire.http_client(timeout=60) as http,
        http.stream("POST", server.v1 + "/chat/completions", json=body, headers=HEADERS) as resp,
    ):
        assert resp.status_code == 200
        lines = resp.iter_lines()  # held, so leaving the loop does not close the connection
        for line in lines:
            if line.startswith("data: ") and '"content"' in line:
                seen.append(line)
            if len(seen) >= 5:
                break
        engine = _health(server).json()["engines"]["small"]
        assert engine["scheduler_has_requests"] is True, engine
        assert engine["unfinished_requests"] == 1
    # The connection is closed here, thousands of tokens before the request would finish.

    def drained():
        engine = _health(server).json()["engines"]["small"]
        return engine["scheduler_has_requests"] is False and engine["unfinished_requests"] == 0

    assert _wait_for(drained, timeout_s=20), _health(server).json()
    assert _wait_for(
        lambda: _metric(server, "tessera_requests_total", model="small", status="cancelled") == cancelled_before + 1,
        timeout_s=10,
    )
    assert _wait_for(lambda: _usage_rows(server, "cancelled"), timeout_s=10)
    row = _usage_rows(server, "cancelled")[-1]
    assert row["model_variant"] == "small"
    assert 5 <= row["output_tokens"] < 3500
    assert row["text_tokens"] > 0


def _usage_rows(server, status):
    """Usage rows the server wrote to its SQLite file, one per request that reached an engine."""
    import sqlite3

    conn = sqlite3.connect(server.log_path.parent / "tessera.db")
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM inference_requests WHERE status = ?", (status,))]
    finally:
        conn.close()


def test_metrics_report_latency_histograms_and_request_mix(server, client):
    client.chat.completions.create(
        model="small", messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
    ).close()
    resp = client.chat.completions.create(model="small", max_tokens=4, messages=[{"role": "user", "content": "hey"}])
    assert resp.usage.completion_tokens >= 1
    assert _metric(server, "tessera_time_to_first_token_seconds_count", model="small") >= 1
    assert _metric(server, "tessera_e2e_request_latency_seconds_count", model="small") >= 1
    assert _metric(server, "tessera_inter_token_latency_seconds_count", model="small") >= 1
    assert _metric(server, "tessera_requests_total", model="small", modalities="text", status="completed") >= 1
    assert _metric(server, "tessera_engine_up", model="large") == 1
    assert _metric(server, "tessera_engine_kv_cache_blocks", model="small") > 0
    completed = _usage_rows(server, "completed")
    assert any(r["request_id"] == resp.id and r["output_tokens"] == resp.usage.completion_tokens for r in completed)


def test_an_idle_connection_outlives_the_sdks_keep_alive(server):
    """The OpenAI SDK (httpx) keeps an idle connection for 5 s and then reuses it. A server that also closes idle
    connections at 5 s races that reuse, and the client's request fails to read: the server must hold them longer."""
    conn = http.client.HTTPConnection("127.0.0.1", int(server.base_url.rsplit(":", 1)[1]), timeout=30)
    try:
        conn.request("GET", "/health")
        first = conn.getresponse()
        first.read()
        assert first.status == 200
        sock = conn.sock
        time.sleep(6.0)  # past the SDK's 5 s (and the HTTP server's own default)
        conn.request("GET", "/health")
        second = conn.getresponse()  # RemoteDisconnected if the server closed the idle connection
        second.read()
        assert second.status == 200
        assert conn.sock is sock, "the client had to open a new connection"
    finally:
        conn.close()


def _engine_processes(server):
    procs = [
        p
        for p in psutil.Process(server.proc.pid).children(recursive=True)
        if "EngineCore" in " ".join(p.cmdline()) or "EngineCore" in p.name()
    ]
    return sorted(procs, key=lambda p: p.create_time())


@pytest.mark.destructive
def test_dead_engine_turns_health_and_requests_to_503(server, client):
    engines = _engine_processes(server)
    assert len(engines) == 4, [p.cmdline() for p in engines]  # minilm, whisper, small, large
    engines[-1].send_signal(signal.SIGKILL)  # the embedding and transcription pools start first, then small, large

    assert _wait_for(lambda: _health(server).status_code == 503, timeout_s=30)
    health = _health(server)
    assert health.headers["retry-after"]
    assert health.json()["engines"]["large"]["status"] == "dead"
    assert health.json()["engines"]["small"]["status"] == "ok"

    resp = openai_wire.post(
        server.v1 + "/chat/completions",
        headers=HEADERS,
        timeout=30,
        json={"model": "large", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert resp.status_code == 503
    assert int(resp.headers["retry-after"]) >= 1
    assert resp.json()["error"]["code"] == "engine_unavailable"
    still = client.chat.completions.create(model="small", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert still.usage.completion_tokens >= 1
