"""A remote pool of another family: a tiny Qwen2.5-VL on a `vllm serve` replica, once with the gateway's vision tower
and embedding cache (encoder outputs over the wire) and once with raw media the replica encodes itself
(`content_parts`). Both give the same greedy answer and the same counts, which are what vLLM's processor places."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.replicas import Replica
from tests import media
from tests.conftest import API_KEY, LiveServer, pools_env, run_server
from tests.integration.test_pipeline import _greedy


@pytest.fixture(scope="module")
def vl_gateway(vl_replica: Replica, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    vl_replica.wait_ready()
    remote = {"model": str(vl_replica.checkpoint), "replicas": [vl_replica.url]}
    pools = [{"name": "vl", **remote}, {"name": "vl-raw", **remote, "encoder_pools": False}]
    data = tmp_path_factory.mktemp("vl-gateway")
    yield from run_server(pools_env(data, pools), data / "server.log")


def _image(seed: int) -> dict:
    return {"type": "image_url", "image_url": {"url": media.png_data_url(seed, (640, 480))}}


def test_a_qwen2_5_vl_replica_answers_alike_from_encoder_outputs_and_raw_media(vl_gateway):
    from tests.openai_wire import openai_client

    client = openai_client(vl_gateway.v1, API_KEY, timeout=120)
    parts = [{"type": "text", "text": "Describe the image."}, _image(61), _image(62)]
    encoded, encoded_tokens, encoded_prompt = _greedy(client, parts, model="vl")
    raw, raw_tokens, raw_prompt = _greedy(client, parts, model="vl-raw")
    assert (encoded_tokens, encoded_prompt) == (raw_tokens, raw_prompt)
    details = [r.usage.prompt_tokens_details for r in (encoded, raw)]
    assert [d.image_tokens for d in details] == [2 * 54, 2 * 54]  # 640x480 at 224² max pixels: 54 each
    again, again_tokens, _ = _greedy(client, parts, model="vl")
    assert again.usage.prompt_tokens_details.model_extra["cached_image_tokens"] == 2 * 54
    assert again_tokens == encoded_tokens
