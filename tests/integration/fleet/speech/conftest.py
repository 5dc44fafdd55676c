"""Fixtures of the remote transcription tests: two `vllm serve` replicas of the demo Whisper tiny.en and a gateway
whose `whisper` pool runs on them.

They are a package of their own, which runs (and is torn down) before the rest of the fleet package starts its chat,
embedding and Qwen2.5-VL replicas: with the shared server up, as it is in a full run, the machine cannot hold two
more replicas beside those."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from bench.replicas import Replica
from tests.conftest import MODELS_DIR, LiveServer, free_port, pools_env, run_server


@pytest.fixture(scope="package")
def speech_replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sequence[Replica]]:
    """Two replicas started together (not yet waited for), each with the in-process pool's 256 MiB of KV cache."""
    logs = tmp_path_factory.mktemp("speech-replicas")
    started = [
        Replica(
            MODELS_DIR / "whisper",
            "whisper",
            free_port(),
            logs / f"whisper-{i}.log",
            runner="transcription",
            kv_cache_bytes=256 << 20,
        )
        for i in range(2)
    ]
    try:
        for replica in started:
            replica.start()
        yield started
    finally:
        for replica in started:
            replica.stop()


@pytest.fixture(scope="package")
def speech_gateway(
    speech_replicas: Sequence[Replica], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """A gateway whose `whisper` pool is the two replicas; it starts while they load (it waits for a first one), and
    is handed out once both answer."""
    pools = [
        {
            "name": "whisper",
            "kind": "transcription",
            "model": str(MODELS_DIR / "whisper"),
            "replicas": [r.url for r in speech_replicas],
        }
    ]
    data = tmp_path_factory.mktemp("speech-gateway")
    running = run_server(pools_env(data, pools), data / "server.log")
    gateway = next(running)
    try:
        for replica in speech_replicas:
            replica.wait_ready()
        yield gateway
    finally:
        running.close()
