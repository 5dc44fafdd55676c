"""Two model families in one gateway, each in process: Qwen2.5-VL (images; the gateway's vision tower and embedding
cache) and Qwen2-Audio (audio; the gateway runs its audio tower, so a cached clip skips it), each beside a pool of the
same checkpoint whose engine encodes for itself. The gateway's encoding and the engine's give the same greedy tokens
and the same counts, and `auto` sends each medium to a pool that takes it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from demo.family_checkpoints import build_family_checkpoint
from tests import media
from tests.conftest import ADMIN_KEY, API_KEY, EARLY_RELEASE, MODELS_DIR, LiveServer, pools_env, run_server
from tests.integration.test_pipeline import _greedy

ENGINE_FLAGS = {"kv_cache_gib": 0.125, "max_model_len": 2048, "max_num_seqs": 4}


@pytest.fixture(scope="session")
def families_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    vl = build_family_checkpoint("qwen2_5_vl", MODELS_DIR / "families" / "qwen2_5_vl")
    audio = build_family_checkpoint("qwen2_audio", MODELS_DIR / "families" / "qwen2_audio")
    pools = [
        {"name": "vl", "model": str(vl), "strength": 1, **ENGINE_FLAGS},
        {"name": "vl-engine", "model": str(vl), "encoder_pools": False, "strength": 0, **ENGINE_FLAGS},
        {"name": "hear", "model": str(audio), "encoder_pools": True, "strength": 3, **ENGINE_FLAGS},
        {"name": "hear-engine", "model": str(audio), "encoder_pools": False, "strength": 2, **ENGINE_FLAGS},
    ]
    data = tmp_path_factory.mktemp("tessera-families")
    env = pools_env(data, pools, TESSERA_ADMIN_KEY=ADMIN_KEY)
    running = run_server(env, data / "server.log")
    EARLY_RELEASE["families_server"] = running
    yield next(running)
    running.close()


@pytest.fixture(scope="session")
def families(families_server: LiveServer):
    from tests.openai_wire import openai_client

    return openai_client(families_server.v1, API_KEY, timeout=120)


def _image(seed, size=(640, 480)):
    return {"type": "image_url", "image_url": {"url": media.png_data_url(seed, size)}}


def _clip(seconds, rate=22050):
    return {"type": "input_audio", "input_audio": {"data": media.audio_b64(seconds, rate), "format": "wav"}}


def _details(resp):
    return resp.usage.prompt_tokens_details


def test_qwen2_5_vl_encoded_in_the_gateway_answers_as_the_engine_does(families):
    parts = [{"type": "text", "text": "Describe the image."}, _image(11), _image(12, (224, 224))]
    gateway, gateway_tokens, gateway_prompt = _greedy(families, model="vl", parts=parts)
    engine, engine_tokens, engine_prompt = _greedy(families, model="vl-engine", parts=parts)
    assert (gateway_tokens, gateway_prompt) == (engine_tokens, engine_prompt)
    # 640x480 and 224x224 at 224² max pixels, 14 px patches merged 2x2: 54 and 64 tokens, as the engine placed them.
    assert _details(gateway).image_tokens == _details(engine).image_tokens == 54 + 64
    assert gateway.usage.prompt_tokens == engine.usage.prompt_tokens == len(gateway_prompt)


def test_a_repeated_image_is_an_embedding_cache_hit(families):
    parts = [{"type": "text", "text": "Again?"}, _image(21)]
    miss, miss_tokens, _ = _greedy(families, model="vl", parts=parts)
    hit, hit_tokens, _ = _greedy(families, model="vl", parts=parts)
    assert _details(miss).model_extra["cached_image_tokens"] == 0
    assert _details(hit).model_extra["cached_image_tokens"] == _details(hit).image_tokens == 54
    assert hit_tokens == miss_tokens


def test_qwen2_audio_embeddings_from_the_gateway_answer_as_the_engine_does(families):
    parts = [{"type": "text", "text": "What does the speaker say?"}, _clip(2.5)]
    gateway, gateway_tokens, gateway_prompt = _greedy(families, model="hear", parts=parts)
    engine, engine_tokens, engine_prompt = _greedy(families, model="hear-engine", parts=parts)
    assert (gateway_tokens, gateway_prompt) == (engine_tokens, engine_prompt)
    assert _details(gateway).audio_tokens == _details(engine).audio_tokens == 62  # 250 mel frames: (125 - 2) // 2 + 1


def test_a_repeated_clip_skips_the_audio_tower(families, families_server):
    parts = [{"type": "text", "text": "Once more."}, _clip(1.5)]
    miss, miss_tokens, _ = _greedy(families, model="hear", parts=parts)
    hit, hit_tokens, _ = _greedy(families, model="hear", parts=parts)
    assert _details(miss).model_extra["cached_audio_tokens"] == 0
    assert _details(hit).model_extra["cached_audio_tokens"] == _details(hit).audio_tokens > 0
    assert hit_tokens == miss_tokens


def test_auto_sends_each_medium_to_a_family_that_takes_it(families):
    heard, _, _ = _greedy(families, model="auto", parts=[{"type": "text", "text": "Listen."}, _clip(1.0)])
    seen, _, _ = _greedy(families, model="auto", parts=[{"type": "text", "text": "Look."}, _image(31)])
    assert heard.model in ("hear", "hear-engine")
    assert seen.model in ("vl", "vl-engine")


def test_an_image_to_the_audio_family_is_a_clear_400(families):
    from openai import BadRequestError

    with pytest.raises(BadRequestError) as err:
        _greedy(families, model="hear", parts=[{"type": "text", "text": "Look."}, _image(41)])
    assert "image" in str(err.value)


def test_models_name_each_pools_architecture_and_where_it_encodes(families_server):
    resp = httpx.get(families_server.v1 + "/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10)
    resp.raise_for_status()
    models = {m["id"]: m for m in resp.json()["data"]}
    assert models["vl"]["architecture"] == "Qwen2_5_VLForConditionalGeneration"
    assert models["vl"]["encoding"] == {"image": "gateway"}
    assert models["vl-engine"]["encoding"] == {"image": "engine"}
    assert models["hear"]["architecture"] == "Qwen2AudioForConditionalGeneration"
    assert models["hear"]["encoding"] == {"audio": "gateway"}
