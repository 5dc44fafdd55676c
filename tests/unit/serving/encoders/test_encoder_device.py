"""Where the vision encoder runs: placement rules, dtype on the real small tower, warm-up, and start-up wiring."""

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig

import tessera.pools
from config.settings import Settings
from serving.encoders.families import family_for
from serving.encoders.placement import EncoderPlacement
from serving.encoders.pools import AudioFeaturePool, VisionEncoderPool
from serving.engines.base import EngineCapacity
from tests import media

IMAGES = [((320, 240), 1), ((64, 64), 2), ((100, 300), 3)]


@pytest.fixture(scope="module")
def checkpoint(small_checkpoint) -> Path:
    return small_checkpoint


@pytest.fixture(scope="module")
def fp32(checkpoint):
    pool = VisionEncoderPool.for_checkpoint(checkpoint, device="cpu", dtype="float32")
    pool.load()
    return pool


@pytest.fixture(scope="module")
def bf16(checkpoint):
    pool = VisionEncoderPool.for_checkpoint(checkpoint, device="cpu", dtype="bfloat16")
    pool.load()
    return pool


@pytest.mark.parametrize(
    ("device", "dtype", "gpus", "expected"),
    [
        ("auto", "float32", 0, "cpu"),
        ("auto", "bfloat16", 2, "cuda:0"),
        ("auto", "float16", 1, "cuda:0"),
        ("cpu", "float32", 2, "cpu"),
        ("cpu", "bfloat16", 0, "cpu"),
        ("cuda", "float16", 1, "cuda:0"),
        ("cuda:1", "bfloat16", 2, "cuda:1"),
    ],
)
def test_placement_resolves(device, dtype, gpus, expected):
    assert EncoderPlacement.resolve(device, dtype, cuda_devices=gpus) == EncoderPlacement(expected, dtype)


@pytest.mark.parametrize(
    ("device", "dtype", "gpus", "message"),
    [
        ("cpu", "float16", 2, "encoder_dtype float16 needs a GPU, but encoder_device 'cpu' is the CPU;"),
        ("auto", "float16", 0, "'auto' found no CUDA device"),
        ("cuda", "float32", 0, "encoder_device 'cuda' is not available: torch sees no CUDA device"),
        ("cuda:1", "float32", 1, "encoder_device 'cuda:1' is not available: torch sees 1 CUDA device(s)"),
        ("tpu", "float32", 1, "encoder_device must be 'auto', 'cpu', 'cuda' or 'cuda:N', not 'tpu'"),
        ("cpu:0", "float32", 0, "encoder_device must be"),
        ("cuda:x", "float32", 1, "encoder_device must be"),
        ("cpu", "float64", 0, "encoder_dtype must be one of float32, bfloat16, float16, not 'float64'"),
    ],
)
def test_placement_refusals_name_the_setting(device, dtype, gpus, message):
    with pytest.raises(ValueError) as err:
        EncoderPlacement.resolve(device, dtype, cuda_devices=gpus)
    assert message in str(err.value)


def test_auto_asks_torch(checkpoint):
    expected = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert EncoderPlacement.resolve("auto", "float32").device == expected
    assert VisionEncoderPool.for_checkpoint(checkpoint).placement == EncoderPlacement(expected, "float32")


def test_float16_on_cpu_is_refused_before_loading(checkpoint):
    with pytest.raises(ValueError, match="float16 needs a GPU"):
        VisionEncoderPool.for_checkpoint(checkpoint, device="cpu", dtype="float16")


def test_explicit_cpu_float32_matches_the_default_pool(checkpoint, fp32, small_counter):
    default = VisionEncoderPool.for_checkpoint(
        checkpoint
    )  # auto: the same identity wherever it lands, as the device is not in it
    assert default.identity == fp32.identity
    emb = fp32.encode_batch([media.image(1)])[0]
    assert emb.embeds.dtype == torch.float32
    assert emb.embeds.device.type == "cpu"
    assert emb.tokens == small_counter.image(320, 240)


def test_bf16_returns_cpu_float32_close_to_float32(fp32, bf16, small_counter):
    images = [media.image(seed, size) for size, seed in IMAGES]
    exact, low = fp32.encode_batch(images), bf16.encode_batch(images)
    for (size, _), a, b in zip(IMAGES, exact, low, strict=True):
        assert b.embeds.dtype == torch.float32
        assert b.embeds.device.type == "cpu"
        assert b.embeds.shape == a.embeds.shape
        assert b.grid_thw == a.grid_thw
        assert b.tokens == small_counter.image(*size)
        relative = ((b.embeds - a.embeds).norm() / a.embeds.norm()).item()
        assert 0 < relative < 0.03  # really computed in bfloat16 (measured ~0.0065), and still the same tower


def test_dtype_is_part_of_the_identity(fp32, bf16):
    assert bf16.identity != fp32.identity
    assert len(bf16.identity) == len(fp32.identity) == 64


def test_warm_up_runs_a_real_batch_outside_the_stats(checkpoint, small_counter):
    pool = VisionEncoderPool.for_checkpoint(checkpoint, device="cpu")
    pool.load()
    seen = []

    def record(embeds):
        seen.append(tuple(embeds.shape))
        return embeds

    pool.fault = record
    assert pool.warmup_s is None
    took = pool.warm_up()
    side = 14 * pool.merge_size * 2
    assert seen == [(small_counter.image(side, side), 256)]
    assert took > 0
    assert pool.warmup_s == took
    assert (pool.stats.batches, pool.stats.items, pool.stats.failures) == (0, 0, {})


def test_audio_warm_up_computes_features_outside_the_stats(checkpoint):
    audio = AudioFeaturePool(checkpoint, family_for("Qwen2_5OmniForConditionalGeneration"), None)
    assert audio.warm_up() > 0
    assert audio.warmup_s is not None
    assert (audio.stats.batches, audio.stats.items) == (0, 0)


class _LoadedEngine:
    """An engine that is only a checkpoint: what `_build_pool` reads before any request."""

    def __init__(self, checkpoint: Path) -> None:
        self.model_path = str(checkpoint)
        self.capacity = EngineCapacity(num_blocks=64, block_size=16, max_model_len=4096)
        self._config = AutoConfig.from_pretrained(checkpoint)

    def hf_config(self):
        return self._config


def test_build_pool_places_and_warms_the_encoders(checkpoint):
    settings = Settings(encoder_device="cpu", encoder_dtype="bfloat16", encoder_threads=2)

    async def build():
        engine = _LoadedEngine(checkpoint)
        family = family_for("Qwen2_5OmniForConditionalGeneration")
        built = await tessera.pools.build_pool(settings, 0, settings.pools[0], engine, 0, family)
        try:
            return built.vision, built.audio
        finally:
            if built.vision is not None:
                await built.vision.close()
            if built.audio is not None:
                await built.audio.close()
            if built.counter is not None:
                built.counter.close()

    vision, audio = asyncio.run(build())
    assert vision is not None
    assert audio is not None
    assert vision.placement == EncoderPlacement("cpu", "bfloat16")
    assert vision._threads == 2
    assert vision.warmup_s is not None
    assert audio.warmup_s is not None
    assert vision.stats.batches == 0


def test_start_pools_refuses_float16_on_cpu_before_building_anything(monkeypatch):
    def must_not_run(_settings, _checkpoints):
        raise AssertionError("checkpoints were built before the placement was checked")

    monkeypatch.setattr(tessera.pools, "model_paths", must_not_run)
    settings = Settings(encoder_device="cpu", encoder_dtype="float16")

    async def start():
        async with AsyncExitStack() as stack:
            await tessera.pools.start_pools(settings, stack, None)

    with pytest.raises(ValueError, match="encoder_dtype float16 needs a GPU"):
        asyncio.run(start())
