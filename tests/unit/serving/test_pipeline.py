"""The pipeline around a stub engine: degrade-to-text only when allowed, admission released on failure."""

import asyncio
import json

import httpx
import pytest

from api.protocol import ChatMessage
from serving.admission import AdmissionController
from serving.encoders import EncoderFailure, VisionGeometry
from serving.engine import EngineCapacity, EngineStats, GenerationParams
from serving.ingest import MediaIngest
from serving.media.audio import AudioLoader
from serving.media.fetch import FetchPolicy, MediaFetcher
from serving.media.images import ImageLoader
from serving.pipeline import Pipeline, PipelineRequest
from serving.pools import ModelPool, PoolRegistry
from tests import media


class _Tokenizer:
    def apply_chat_template(self, messages, **_):
        return json.dumps(messages)

    def encode(self, text, add_special_tokens=False):
        return text.split()


class _Engine:
    name = "stub"
    model_path = "/nonexistent"
    capacity = EngineCapacity(num_blocks=100, block_size=16, max_model_len=4096)
    stats = EngineStats()

    def is_healthy(self):
        return True

    def tokenizer(self):
        return _Tokenizer()


class _BrokenVision:
    identity = "broken"
    geometry = VisionGeometry(14, 2, 56 * 56, 224 * 224)

    async def encode(self, image):
        raise EncoderFailure("the vision encoder pool is overloaded", reason="overloaded")


def _pipeline():
    pool = ModelPool("stub", _Engine(), modalities=["text", "image", "audio"], geometry=_BrokenVision.geometry)
    pool.vision = _BrokenVision()
    pool.admission = AdmissionController(total_blocks=100, block_size=16, headroom_blocks=0)
    policy = FetchPolicy.build(timeout_s=1, max_bytes=1000, max_redirects=0, allow=())
    ingest = MediaIngest(
        ImageLoader(max_pixels=10**7, fetcher=MediaFetcher(httpx.AsyncClient(), policy)),
        AudioLoader(target_rate=16000, max_seconds=30),
        workers=1,
    )
    return Pipeline(PoolRegistry([pool]), ingest, None, max_images=4), pool


def _request(allow):
    msg = ChatMessage.model_validate(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": media.png_data_url(1)}},
            ],
        }
    )
    return PipelineRequest("r1", "stub", [msg], GenerationParams(16), allow_degraded=allow)


def test_encoder_failure_is_a_503_unless_degrading_is_allowed():
    pipeline, pool = _pipeline()
    with pytest.raises(EncoderFailure) as exc:
        asyncio.run(pipeline.prepare(_request(False)))
    assert exc.value.unavailable
    assert exc.value.code == "encoder_unavailable"
    assert pool.admission.in_use == 0  # the admission ticket came back


def test_degraded_request_drops_the_media_and_says_so():
    pipeline, pool = _pipeline()
    prepared = asyncio.run(pipeline.prepare(_request(True)))
    assert prepared.degraded == ["image"]
    assert prepared.engine_request.images == []
    assert prepared.engine_request.image_embeds is None
    assert '"image"' not in prepared.engine_request.prompt
    assert prepared.modalities == {"text"}
    assert pool.admission.in_use > 0
    pipeline.release(prepared)
    assert pool.admission.in_use == 0
