"""vLLM's own encoder disaggregation as a fleet's encoder tier, on the CPU: an encoder-only instance
(`--mm-encoder-only`, `ec_producer`) and a replica (`ec_consumer`) sharing vLLM's example shared-storage connector.
A pool whose media go to its replicas raw (`encoder_pools: false`) and that lists the instance in `encoder_replicas`
has each medium encoded there first; the replica loads the stored embeddings instead of running its tower, and
answers exactly as a replica that encoded the image itself. Part of `make test-families` (two more vLLM servers)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.replicas import Replica
from demo.family_checkpoints import build_family_checkpoint
from tests import media
from tests.conftest import API_KEY, MODELS_DIR, free_port, pools_env, run_server

pytestmark = pytest.mark.skipif(
    os.environ.get("TESSERA_FAMILY_MATRIX") != "1", reason="the encoder tier runs with `make test-families`"
)


def _ec(role: str, store: Path) -> tuple[str, ...]:
    config = {
        "ec_connector": "ECExampleConnector",
        "ec_role": role,
        "ec_connector_extra_config": {"shared_storage_path": str(store)},
    }
    return ("--ec-transfer-config", json.dumps(config))


def _ask(client, model, seed, text="What is it?"):
    image = {"type": "image_url", "image_url": {"url": media.png_data_url(seed, (640, 480))}}
    resp = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": [{"type": "text", "text": text}, image]}],
        max_tokens=6,
        temperature=0,
        logprobs=True,
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )
    return resp.choices[0].model_extra["token_ids"], [t.logprob for t in resp.choices[0].logprobs.content]


def test_a_replica_decodes_with_the_encoder_tiers_embeddings(tmp_path, monkeypatch):
    from tests.openai_wire import openai_client

    path = build_family_checkpoint("qwen2_5_vl", MODELS_DIR / "families" / "qwen2_5_vl")
    store = tmp_path / "ec-store"
    store.mkdir()
    producer = Replica(
        path,
        "vl",
        free_port(),
        tmp_path / "producer.log",
        kv_cache_bytes=64 << 20,
        extra_args=("--mm-encoder-only", *_ec("ec_producer", store)),
    )
    consumer = Replica(
        path,
        "vl",
        free_port(),
        tmp_path / "consumer.log",
        kv_cache_bytes=256 << 20,
        extra_args=_ec("ec_consumer", store),
    )
    producer.start()
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")  # the consumer's connector logs each entry it loads
    consumer.start()
    monkeypatch.delenv("VLLM_LOGGING_LEVEL")
    try:
        for replica in (producer, consumer):
            replica.wait_ready()
        raw = {"model": str(path), "replicas": [consumer.url], "encoder_pools": False}
        pools = [{"name": "tier", **raw, "encoder_replicas": [producer.url]}, {"name": "plain", **raw}]
        running = run_server(pools_env(tmp_path / "data", pools), tmp_path / "server.log")
        server = next(running)
        try:
            client = openai_client(server.v1, API_KEY, timeout=120)
            # The tier's answer is the replica's own: the same image through a pool without the tier (another
            # identity, so the replica encodes it itself) gives the same tokens and log probabilities.
            tiered, plain = _ask(client, "tier", 5), _ask(client, "plain", 5)
            assert tiered[0] == plain[0]
            assert tiered[1] == pytest.approx(plain[1], abs=1e-5)
            stored = sorted(store.glob("*/encoder_cache.safetensors"))
            assert len(stored) == 1  # the tier's image only: the plain pool's stayed on the replica
            # And the replica really decoded from the store: its connector logged loading the tier's entry (the
            # file is named by the item's identity), and nothing for the plain pool's image.
            loaded = [
                line for line in consumer.log_path.read_text().splitlines() if "Success load encoder cache" in line
            ]
            assert len(loaded) == 1
            assert stored[0].parent.name in loaded[0]
        finally:
            running.close()
    finally:
        for replica in (producer, consumer):
            replica.stop()
