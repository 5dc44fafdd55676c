"""The vision encoder pool on the real small checkpoint's tower: batching, its sizes against the engine's own
counts, and the NaN guard."""

import asyncio

import pytest
import torch

from serving.encoders.pools import EncoderFailure, VisionEncoderPool
from tests import media


@pytest.fixture(scope="module")
def pool(small_checkpoint):
    vision = VisionEncoderPool.for_checkpoint(small_checkpoint, window_ms=20, max_batch=8)
    vision.load()
    return vision


def test_the_engines_count_matches_the_tower(pool, small_counter):
    for size in [(320, 240), (64, 64), (1000, 300)]:
        emb = pool.encode_batch([media.image(1, size)])[0]
        assert emb.tokens == small_counter.image(*size)


def test_batched_and_single_encodes_agree(pool):
    images = [media.image(i) for i in range(3)]
    batched = pool.encode_batch(images)
    for img, emb in zip(images, batched, strict=True):
        assert torch.allclose(pool.encode_batch([img])[0].embeds, emb.embeds, atol=1e-5)


def test_micro_batching_groups_concurrent_requests(pool):
    async def run():
        pool.start()
        before = pool.stats.batches
        results = await asyncio.gather(*(pool.encode(media.image(i, (64, 64))) for i in range(6)))
        await pool.close()
        return results, pool.stats.batches - before

    results, batches = asyncio.run(run())
    assert len(results) == 6
    assert batches < 6


def test_non_finite_output_fails_only_that_image_and_is_counted(pool):
    def poison_first(embeds):
        embeds = embeds.clone()
        embeds[0, 0] = float("nan")
        return embeds

    pool.fault = poison_first
    try:
        results = pool.encode_batch([media.image(1), media.image(2)])
    finally:
        pool.fault = None
    assert isinstance(results[0], EncoderFailure)
    assert results[0].reason == "non_finite"
    assert not isinstance(results[1], EncoderFailure)
    assert pool.stats.failures["non_finite"] >= 1


def test_the_engines_audio_count_for_the_omni_tower(small_counter):
    """Qwen2.5-Omni's tower: 100 mel frames a second, two stride-2 reductions (25 tokens a second)."""
    assert small_counter.audio_seconds(2.0) == 50
    assert small_counter.audio_seconds(1.0) == 25
    assert small_counter.audio_seconds(30.0) == 750
