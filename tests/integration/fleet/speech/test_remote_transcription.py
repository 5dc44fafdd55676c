"""A transcription pool on two Whisper tiny.en replicas (`vllm serve`, fed through vLLM's token-in/token-out
endpoint) behind a gateway, against the shared server's in-process `whisper` pool (the same demo checkpoint):
through the official SDK the replicas answer each clip with the in-process pool's text and are metered alike; and
when one replica is SIGKILLed while a batch is in flight, every request still gets that text (what the dead replica
held is restarted on the other) and its usage row.

Each clip is distinct, and unlike any other test's (a tenant's results cache answers a repeat without an engine)."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from bench.common import speech
from bench.replicas import Replica
from tests.conftest import API_KEY, LiveServer
from tests.openai_wire import openai_client

SENTENCES = ("The train leaves at seven tonight.", "Please close the window in the kitchen.", "My sister reads a book.")
BATCH = 8  # requests in flight when a replica is killed
DEADLINE_S = 120.0  # for the whole batch, and for the kill to find requests in flight


def _wav(samples: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, samples, 16_000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@pytest.fixture(scope="module")
def spoken() -> list[np.ndarray]:
    return [speech(s) for s in SENTENCES]


def _clip(spoken: list[np.ndarray], index: int, sentences: int = 1) -> bytes:
    """`sentences` spoken one after another, then `index + 1` hundredths of a second of silence: a clip of its own."""
    parts = [spoken[(index + i) % len(spoken)] for i in range(sentences)]
    return _wav(np.concatenate([*parts, np.zeros(160 * (index + 1), dtype=np.float32)]))


def _transcribe(client: Any, clip: bytes) -> tuple[str, str]:
    raw = client.audio.transcriptions.with_raw_response.create(model="whisper", file=("clip.wav", clip))
    return raw.parse().text, raw.headers["x-request-id"]


def _receipt(server: LiveServer, request_id: str) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {API_KEY}"}
    for _ in range(100):
        resp = httpx.get(f"{server.v1}/usage/{request_id}", headers=headers, timeout=10)
        if resp.status_code == 200 and resp.json()["status"] != "running":
            return resp.json()
        time.sleep(0.1)
    raise AssertionError(f"no settled usage row for {request_id}: {resp.status_code} {resp.text}")


def _metered(receipt: dict[str, Any]) -> tuple[Any, ...]:
    """What a transcription is metered by: its status, model, endpoint, audio seconds and tokens."""
    fields = ("status", "model", "endpoint", "audio_seconds", "cached", "tokens")
    return tuple(receipt[field] for field in fields)


def _replicas(gateway: LiveServer) -> dict[str, dict[str, Any]]:
    health = httpx.get(gateway.base_url + "/health", timeout=10).json()
    return {r["url"]: r for r in health["engines"]["whisper"]["replicas"]}


def _decoded(replica: Replica) -> float:
    """The tokens a replica has decoded since it started, as its own /metrics counts them."""
    text = httpx.get(replica.url + "/metrics", timeout=5).text
    return sum(float(v) for v in re.findall(r"^vllm:generation_tokens_total\{[^}]*\} (\S+)$", text, re.MULTILINE))


def _retries(gateway: LiveServer) -> int:
    """Requests the gateway retried on another replica after theirs failed (serving.engines.remote logs each)."""
    return gateway.log_path.read_text(errors="replace").count("retrying elsewhere")


def _compare(
    server: LiveServer,
    gateway: LiveServer,
    local: Sequence[tuple[str, str]],
    remote: Sequence[tuple[str, str]],
) -> None:
    assert [text for text, _ in remote] == [text for text, _ in local]
    assert all(text.strip() for text, _ in local)
    for (_, local_id), (_, remote_id) in zip(local, remote, strict=True):
        here, there = _receipt(server, local_id), _receipt(gateway, remote_id)
        assert _metered(there) == _metered(here)
        assert (there["status"], there["cached"]) == ("completed", False)
        assert there["tokens"]["audio"] > 0
        assert there["tokens"]["output"] > 0


# `speech_replicas` comes first: the replicas load while the shared server starts, where it is not yet up.
def test_replicas_transcribe_as_the_in_process_pool_and_are_metered_alike(
    speech_replicas, client, server, speech_gateway, spoken
):
    gateway = speech_gateway
    fleet = openai_client(gateway.v1, API_KEY, timeout=120)
    clips = [_clip(spoken, i) for i in range(len(SENTENCES))]
    local = [_transcribe(client, clip) for clip in clips]
    remote = [_transcribe(fleet, clip) for clip in clips]
    _compare(server, gateway, local, remote)
    assert "train" in local[0][0].lower()
    picks = {url: r["picks"] for url, r in _replicas(gateway).items()}
    assert sorted(picks) == sorted(r.url for r in speech_replicas)
    assert all(n > 0 for n in picks.values()), picks  # both replicas answered (and are warm for the next test)


def test_a_replica_killed_mid_batch_leaves_every_request_answered_and_metered(
    speech_replicas, client, server, speech_gateway, spoken
):
    gateway = speech_gateway
    fleet = openai_client(gateway.v1, API_KEY, timeout=DEADLINE_S)
    clips = [_clip(spoken, len(SENTENCES) + i, sentences=3) for i in range(BATCH)]  # about 10 s each
    with ThreadPoolExecutor(max_workers=4) as pool:
        local = list(pool.map(lambda clip: _transcribe(client, clip), clips))
    victim, survivor = speech_replicas
    retried_before, decoded_before = _retries(gateway), _decoded(victim)
    deadline = time.monotonic() + DEADLINE_S
    with ThreadPoolExecutor(max_workers=BATCH) as pool:
        futures = [pool.submit(_transcribe, fleet, clip) for clip in clips]
        # Until the victim holds requests of the batch and has decoded some of it: they are streaming.
        while _replicas(gateway)[victim.url]["in_flight"] == 0 or _decoded(victim) == decoded_before:
            assert time.monotonic() < deadline, "the victim decoded nothing of the batch"
            assert not all(f.done() for f in futures), "the batch finished before the victim decoded any of it"
            time.sleep(0.05)
        victim.kill()  # SIGKILL, its engine process with it, mid-decode
        remote = [f.result(timeout=max(1.0, deadline - time.monotonic())) for f in futures]
    _compare(server, gateway, local, remote)
    assert _retries(gateway) > retried_before  # what the victim held went to the survivor
    states = {url: r["state"] for url, r in _replicas(gateway).items()}
    assert states == {victim.url: "ejected", survivor.url: "up"}
