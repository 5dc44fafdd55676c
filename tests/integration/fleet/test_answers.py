"""What the embedded engine does, a pool on remote replicas does too (the same greedy output and the same
per-modality usage); each replica shows in /health and /metrics, and a cancelled stream frees its replica."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.conftest import API_KEY
from tests.integration.fleet.calls import all_up, ask, scrape


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("kind", ["text", "image", "audio", "image+audio"])
def test_remote_answers_as_the_embedded_engine(server, gateway, kind, stream):
    """The session server runs the same checkpoint in-process: greedy text and every usage count agree."""
    embedded = ask(server.v1, kind, 11, stream)
    remote = ask(gateway.v1, kind, 11, stream)
    assert remote[1] == embedded[1]
    assert remote[0] == embedded[0]
    if "image" in kind:
        assert remote[1]["image"] > 0
    if "audio" in kind:
        assert remote[1]["audio"] > 0


def test_health_and_metrics_show_each_replica(gateway, replicas):
    listed = all_up(gateway)
    assert sorted(r["url"] for r in listed) == sorted(r.url for r in replicas)
    assert all(r["state"] == "up" for r in listed), listed
    metrics = httpx.get(gateway.base_url + "/metrics", timeout=10).text
    for r in replicas:
        name = r.url.removeprefix("http://")
        assert f'tessera_replica_up{{model="small",replica="{name}"}} 1.0' in metrics


def test_cancelled_stream_frees_the_replica(gateway, replicas):
    body = {
        "model": "small",
        "messages": [{"role": "user", "content": "Write a very long story."}],
        "max_tokens": 2000,
        "ignore_eos": True,
        "stream": True,
    }
    headers = {"authorization": f"Bearer {API_KEY}"}
    with httpx.stream("POST", gateway.v1 + "/chat/completions", json=body, headers=headers, timeout=60) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        for _ in range(6):
            next(lines)
        # The replica's gauges are as of its last published step: on a busy machine the first scrape can
        # precede it, so wait (bounded) for the running request to show; under a full test run's load a replica's
        # scrape has lagged past 10 s.
        deadline = time.monotonic() + 30
        while sum(scrape(r).running for r in replicas) != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sum(scrape(r).running for r in replicas) == 1
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        scraped = [scrape(r) for r in replicas]
        if sum(m.running for m in scraped) == 0 and all(m.kv_cache_usage == 0 for m in scraped):
            break
        time.sleep(0.2)
    scraped = [scrape(r) for r in replicas]
    assert sum(m.running + m.waiting for m in scraped) == 0
    assert all(m.kv_cache_usage == 0 for m in scraped)
