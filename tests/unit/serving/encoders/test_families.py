"""Family adapters on tiny real-architecture checkpoints of each family, without an engine: the gateway's tower
gives as many rows as the engine's own processor places, as wide as the adapter says, and an architecture without
an adapter is served by the engine (or refused, when the operator asked for gateway encoders)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from transformers import AutoConfig

from demo.family_checkpoints import build_family_checkpoint
from serving.encoders.counting import MediaTokenCounter
from serving.encoders.families import (
    ADAPTERS,
    AudioEmbedding,
    AudioFeatures,
    architecture_of,
    checkpoint_architecture,
    family_for,
    gateway_family,
)
from serving.encoders.pools import AudioFeaturePool, VisionEncoderPool
from tests.conftest import MODELS_DIR

FAMILY_DIR = MODELS_DIR / "families"
# Each adapted family's tiny checkpoint, and what vLLM's processor places for a 224x224 and a 640x480 image and a
# 10 s clip (None: the family does not take that medium).
EXPECTED = {
    "qwen2_vl": (64, 54, None),
    "qwen2_5_vl": (64, 54, None),
    "qwen3_vl": (49, 48, None),
    "qwen3_vl_moe": (49, 48, None),
    "qwen3_omni_moe": (49, 48, 130),  # Qwen3-Omni hears about 13 tokens a second, not Qwen2-Audio's 25
    "qwen2_audio": (None, None, 250),
}


def checkpoint(family: str) -> Path:
    return build_family_checkpoint(family, FAMILY_DIR / family)


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def family(request):
    path = checkpoint(request.param)
    config = AutoConfig.from_pretrained(path)
    adapter = family_for(architecture_of(config))
    assert adapter is not None
    return request.param, path, config, adapter, MediaTokenCounter.for_checkpoint(path)


def test_the_engines_processor_counts_each_medium(family):
    name, _path, _config, adapter, counter = family
    image_224, image_640, clip_10s = EXPECTED[name]
    if image_224 is not None:
        assert (counter.image(224, 224), counter.image(640, 480)) == (image_224, image_640)
        assert adapter.image_paths
    if clip_10s is not None:
        assert counter.audio_seconds(10.0) == clip_10s
        assert adapter.audio_paths


def test_the_gateways_tower_matches_the_engines_count_and_width(family):
    name, path, config, adapter, counter = family
    if EXPECTED[name][0] is None:
        pytest.skip("no images in this family")
    pool = VisionEncoderPool(path, adapter, config, window_ms=0, max_batch=4)
    pool.load()
    sizes = [(640, 480), (224, 224), (100, 300)]
    out = pool.encode_batch([Image.new("RGB", size, (20 * i, 90, 200)) for i, size in enumerate(sizes)])
    for size, emb in zip(sizes, out, strict=True):
        assert not isinstance(emb, Exception)
        assert emb.embeds.shape == (counter.image(*size), adapter.embedding_width(config))


def test_the_gateways_audio_matches_the_engines_count(family):
    name, path, config, adapter, counter = family
    if EXPECTED[name][2] is None:
        pytest.skip("no audio in this family")
    pool = AudioFeaturePool(path, adapter, config)
    samples = (np.random.default_rng(1).standard_normal(16000 * 10) * 0.1).astype(np.float32)
    out = pool.encode_one(samples, counter.audio_seconds(10.0))
    assert out.tokens == counter.audio_seconds(10.0)
    if adapter.audio_input == "embeds":  # the tower ran here: what the engine takes instead of its own
        assert isinstance(out, AudioEmbedding)
        assert out.embeds.shape[1] == config.text_config.hidden_size
    else:
        assert isinstance(out, AudioFeatures)


def test_every_adapter_names_distinct_architectures_known_to_vllm():
    from vllm.model_executor.models.registry import ModelRegistry

    names = [arch for adapter in ADAPTERS for arch in adapter.architectures]
    assert len(names) == len(set(names))
    supported = set(ModelRegistry.get_supported_archs())
    assert set(names) <= supported


def test_a_text_only_checkpoint_has_no_adapter_and_no_media_counter():
    path = checkpoint("qwen2_text")
    assert checkpoint_architecture(path) == "Qwen2ForCausalLM"
    assert family_for("Qwen2ForCausalLM") is None
    assert gateway_family("small", "Qwen2ForCausalLM", "auto") is None
    with pytest.raises(ValueError, match="not a multimodal model"):
        MediaTokenCounter.for_checkpoint(path)


def test_encoder_pools_true_without_an_adapter_names_the_architecture_and_the_setting():
    with pytest.raises(ValueError) as err:
        gateway_family("large", "Gemma3ForConditionalGeneration", True)
    message = str(err.value)
    assert "pool 'large'" in message
    assert "Gemma3ForConditionalGeneration" in message
    assert "encoder_pools" in message


def test_encoder_pools_false_leaves_every_medium_to_the_engine():
    assert gateway_family("small", "Qwen2_5_VLForConditionalGeneration", False) is None
    adapter = gateway_family("small", "Qwen2_5_VLForConditionalGeneration", "auto")
    assert adapter is not None
    assert adapter.encodes("image", "inprocess")
    assert not adapter.encodes("audio", "inprocess")


def test_qwen3_omni_encodes_images_in_the_gateway_only_for_a_replica():
    """vLLM's chat-path parser for Qwen3-Omni refuses image embeddings; its token-in/token-out path takes them."""
    adapter = family_for("Qwen3OmniMoeForConditionalGeneration")
    assert adapter is not None
    assert not adapter.encodes("image", "inprocess")
    assert adapter.encodes("image", "remote")
    assert adapter.encodes("audio", "inprocess")
