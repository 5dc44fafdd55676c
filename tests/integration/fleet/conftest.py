"""Fixtures of the fleet tests: two real `vllm serve` replicas of the small demo checkpoint and two `vllm serve
--runner pooling` replicas of the demo embedding model, started together once for the package, and two gateways on
PostgreSQL and Redis in front of them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from bench.replicas import Replica, running_replicas
from tests.conftest import ADMIN_KEY, API_KEY, MODELS_DIR, LiveServer, free_port, run_server
from tests.dbs import migrated
from tests.otlp import OtlpReceiver

REDIS_URL = "redis://127.0.0.1:6379/5"
KEY_SECRET = "fleet-test-secret"


@pytest.fixture(scope="package")
def embedding_replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sequence[Replica]]:
    """Two pooling replicas of all-MiniLM-L6-v2, started (not yet waited for) before the chat replicas, so that
    both pairs load at once."""
    from grounding.models import default_minilm_dir

    logs = tmp_path_factory.mktemp("embedding-replicas")
    started = [
        Replica(default_minilm_dir(), "minilm", free_port(), logs / f"minilm-{i}.log", runner="pooling")
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
def vl_replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replica]:
    """A replica of another family (a tiny Qwen2.5-VL), started (not yet waited for) with the others, so that they
    load at once."""
    from demo.family_checkpoints import build_family_checkpoint

    path = build_family_checkpoint("qwen2_5_vl", MODELS_DIR / "families" / "qwen2_5_vl")
    logs = tmp_path_factory.mktemp("vl-replica")
    replica = Replica(path, "vl", free_port(), logs / "vl.log", kv_cache_bytes=256 << 20)
    try:
        replica.start()
        yield replica
    finally:
        replica.stop()


@pytest.fixture(scope="package")
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """Where the fleet's gateways and chat replicas send their spans (gRPC), for the trace test."""
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="package")
def replicas(
    tmp_path_factory: pytest.TempPathFactory, embedding_replicas, vl_replica, otlp_receiver
) -> Iterator[Sequence[Replica]]:
    """Two replicas of their own; TESSERA_TEST_REPLICAS="URL,URL" reuses running ones while developing (the
    failover test then skips: it must kill and restart its replica)."""
    logs = tmp_path_factory.mktemp("replicas")
    if reuse := os.environ.get("TESSERA_TEST_REPLICAS"):
        ports = [int(u.rsplit(":", 1)[1]) for u in reuse.split(",")]
        for replica in embedding_replicas:
            replica.wait_ready()
        yield [Replica(MODELS_DIR / "small", "small", port, logs / f"{port}.log") for port in ports]
        return
    otlp = f"http://127.0.0.1:{otlp_receiver.grpc_port}"
    with running_replicas(MODELS_DIR / "small", "small", 2, logs, otlp_endpoint=otlp) as started:
        for replica in embedding_replicas:
            replica.wait_ready()
        yield started


@pytest.fixture(scope="package")
def fleet_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    engine_iter = migrated("postgresql", tmp_path_factory.mktemp("fleet-db"))
    engine = next(engine_iter)
    yield engine.url.render_as_string(hide_password=False)
    with pytest.raises(StopIteration):
        next(engine_iter)


def _gateway_env(
    replicas: Sequence[Replica],
    db_url: str,
    data: Path,
    shared: Path,
    *,
    flush: bool = True,
    embedding: Sequence[Replica] = (),
    otlp_port: int | None = None,
) -> dict[str, str]:
    import redis

    if flush:
        redis.Redis.from_url(REDIS_URL).flushdb()
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")},
        "TESSERA_PORT": str(free_port()),
        "TESSERA_DATA_DIR": str(data),
        "TESSERA_MODELS_DIR": str(MODELS_DIR),
        "TESSERA_DATABASE_URL": db_url,
        "TESSERA_REDIS_URL": REDIS_URL,
        "TESSERA_KEY_SECRET": KEY_SECRET,
        "TESSERA_API_KEY": API_KEY,
        "TESSERA_ADMIN_KEY": ADMIN_KEY,
        "TESSERA_EMBEDDING_CACHE_DIR": str(shared / "embeddings"),
        "TESSERA_FILES_DIR": str(shared / "files"),
        "TESSERA_GROUNDING": "false",
        **(
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_INSECURE": "true",
                "OTEL_BSP_SCHEDULE_DELAY": "200",  # ms between batches: the trace test waits for them
            }
            if otlp_port
            else {}
        ),
        "TESSERA_POOLS": json.dumps(
            [
                {"name": "small", "aliases": ["8b"], "replicas": [r.url for r in replicas]},
                *(
                    [{"name": "minilm", "kind": "embedding", "replicas": [r.url for r in embedding]}]
                    if embedding
                    else []
                ),
            ]
        ),
    }


@pytest.fixture(scope="package")
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fleet-embeddings")


@pytest.fixture(scope="package")
def gateway(
    replicas, embedding_replicas, otlp_receiver, fleet_db, shared_dir, tmp_path_factory
) -> Iterator[LiveServer]:
    """The first gateway; it also serves an embedding pool on the two pooling replicas, and exports traces."""
    data = tmp_path_factory.mktemp("gateway-a")
    env = _gateway_env(
        replicas, fleet_db, data, shared_dir, embedding=embedding_replicas, otlp_port=otlp_receiver.grpc_port
    )
    yield from run_server(env, data / "server.log")


@pytest.fixture(scope="package")
def gateway_b(gateway, replicas, fleet_db, shared_dir, tmp_path_factory) -> Iterator[LiveServer]:
    """A second gateway: the same database, Redis, key secret, embedding store and files volume; started after the
    first, so the migrations and the demo tenant exist."""
    data = tmp_path_factory.mktemp("gateway-b")
    env = {**_gateway_env(replicas, fleet_db, data, shared_dir), "TESSERA_API_KEY": API_KEY}
    yield from run_server(env, data / "server.log")


@pytest.fixture
def another_gateway(gateway, replicas, fleet_db, shared_dir, tmp_path_factory):
    """Starts a gateway process of the same fleet on demand (a replica started, or restarted, later)."""

    def start() -> Iterator[LiveServer]:
        data = tmp_path_factory.mktemp("gateway-late")
        env = _gateway_env(replicas, fleet_db, data, shared_dir, flush=False)
        return run_server(env, data / "server.log")

    return start
