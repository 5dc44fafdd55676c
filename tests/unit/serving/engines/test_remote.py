"""The remote engine's translation: sampling fields, placeholder expansion with encoder outputs, stream chunks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from serving.encoders.families import ADAPTERS, AudioEmbedding, AudioFeatures, ImageEmbedding, family_for
from serving.engines.base import EngineRequest, GenerationParams, StructuredOutput
from serving.engines.remote_wire import ReplicaFailed, StreamState, content_parts, features_body, sampling_body
from serving.errors import InternalFailure

IMAGE, AUDIO = 900, 901
OMNI = family_for("Qwen2_5OmniForConditionalGeneration")
CONFIG = SimpleNamespace(vision_config=SimpleNamespace(spatial_merge_size=2))


def _request(**kw) -> EngineRequest:
    return EngineRequest(request_id="r1", prompt="", images=[], audios=[], params=GenerationParams(max_tokens=4), **kw)


def test_sampling_body_carries_every_field_vllm_needs():
    params = GenerationParams(
        max_tokens=7,
        temperature=0.5,
        top_k=3,
        seed=9,
        stop=("x",),
        n=2,
        logprobs=2,
        logit_bias={5: -100.0},
        structured=StructuredOutput(json_schema={"type": "object"}),
        ignore_eos=True,
    )
    body = sampling_body(params)
    assert body["max_tokens"] == 7
    assert body["n"] == 2
    assert body["seed"] == 9
    assert body["stop"] == ["x"]
    assert body["logprobs"] == 2
    assert body["logit_bias"] == {"5": -100.0}
    assert body["structured_outputs"] == {"json": {"type": "object"}}
    assert body["ignore_eos"] is True
    assert "seed" not in sampling_body(GenerationParams(max_tokens=1))
    chosen = sampling_body(GenerationParams(max_tokens=4, structured=StructuredOutput(choice=("Yes.", "No."))))
    assert chosen["structured_outputs"] == {"choice": ["Yes.", "No."]}


def test_features_expand_each_placeholder_to_its_medium_in_order():
    images = [ImageEmbedding(torch.zeros(4, 8), (1, 4, 4)), ImageEmbedding(torch.ones(2, 8), (1, 2, 4))]
    audio = AudioFeatures(torch.zeros(128, 200), 200, 50)
    request = _request(image_embeds=images, audio_features=[audio], media_keys={"image": ["ka", "kb"]})
    tokens = [1, IMAGE, 2, AUDIO, IMAGE, 3]
    expanded, features = features_body(tokens, {"image": IMAGE, "audio": AUDIO}, request, OMNI, CONFIG)
    assert features is not None
    assert expanded == [1, *[IMAGE] * 4, 2, *[AUDIO] * audio.tokens, *[IMAGE] * 2, 3]
    assert features["mm_placeholders"]["image"] == [
        {"offset": 1, "length": 4},
        {"offset": 6 + audio.tokens, "length": 2},
    ]
    assert features["mm_placeholders"]["audio"] == [{"offset": 6, "length": audio.tokens}]
    assert features["mm_hashes"]["image"] == ["ka", "kb"]
    assert len(features["mm_hashes"]["audio"][0]) == 64  # no key given: a digest of the features
    assert len(features["kwargs_data"]["image"]) == 2


def test_features_without_media_send_the_prompt_as_is():
    assert features_body([1, 2, 3], {"image": IMAGE}, _request(), OMNI, CONFIG) == ([1, 2, 3], None)


def test_features_refuse_a_prompt_whose_placeholders_do_not_match():
    request = _request(image_embeds=[ImageEmbedding(torch.zeros(4, 8), (1, 4, 4))])
    with pytest.raises(InternalFailure):
        features_body([1, 2], {"image": IMAGE}, request, OMNI, CONFIG)


@pytest.mark.parametrize("family", ADAPTERS, ids=lambda a: a.name)
def test_every_family_serializes_its_encoder_outputs_in_its_own_layout(family):
    """Each adapter's fields go through vLLM's own field layout for its model, one kwargs item per medium."""
    width = 16
    images = [ImageEmbedding(torch.zeros(4, width), (1, 4, 4)), ImageEmbedding(torch.ones(2, width), (1, 2, 4))]
    audio = (
        AudioEmbedding(torch.ones(7, width), 30)
        if family.audio_input == "embeds"
        else AudioFeatures(torch.zeros(8, 30), 30, 7)
    )
    request = _request(
        image_embeds=images if family.image_paths else None,
        audio_features=[audio] if family.audio_paths else None,
    )
    tokens = [1] + ([IMAGE, IMAGE] if family.image_paths else []) + ([AUDIO] if family.audio_paths else []) + [2]
    expanded, features = features_body(tokens, {"image": IMAGE, "audio": AUDIO}, request, family, CONFIG)
    assert features is not None
    if family.image_paths:
        assert len(features["kwargs_data"]["image"]) == 2
        assert expanded.count(IMAGE) == 6
    if family.audio_paths:
        assert len(features["kwargs_data"]["audio"]) == 1
        assert expanded.count(AUDIO) == 7


def test_a_replica_that_encodes_gets_raw_media_named_by_their_keys():
    from PIL import Image

    image = Image.new("RGB", (32, 16), (200, 10, 10))
    request = _request(media_keys={"image": ["k-image"], "audio": ["k-audio"]})
    request = EngineRequest(
        request_id="r1",
        prompt="",
        images=[image],
        audios=[(torch.zeros(1600).numpy(), 16000)],
        params=GenerationParams(max_tokens=4),
        media_keys={"image": ["k-image"], "audio": ["k-audio"]},
    )
    parts = content_parts(request)
    assert [p["type"] for p in parts] == ["image_url", "audio_url"]
    assert parts[0]["url"].startswith("data:image/png;base64,")
    assert parts[1]["url"].startswith("data:audio/wav;base64,")
    assert [p["uuid"] for p in parts] == ["k-image", "k-audio"]


def _chunk(text: str, finish: str | None = None, index: int = 0, **extra) -> dict:
    return {"choices": [{"index": index, "text": text, "token_ids": [7], "finish_reason": finish}], **extra}


def test_a_finishing_delta_waits_for_the_cached_token_count():
    state = StreamState("small", with_logprobs=False)
    first = state.feed(_chunk("a", prompt_token_ids=[1, 2, 3]))
    assert [d.text for d in first] == ["a"]
    assert first[0].prompt_token_ids == [1, 2, 3]
    assert state.feed(_chunk("b", "stop")) == []
    done = state.feed({"choices": [], "usage": {"prompt_tokens_details": {"cached_tokens": 128}}})
    assert [(d.text, d.finish_reason, d.num_cached_tokens) for d in done] == [("b", "stop", 128)]
    assert state.finish() == []


def test_an_error_before_the_first_delta_may_go_elsewhere_and_after_it_may_not():
    with pytest.raises(ReplicaFailed):
        StreamState("small", False).feed({"error": {"message": "engine dead"}})
    state = StreamState("small", False)
    state.feed(_chunk("a"))
    with pytest.raises(InternalFailure):
        state.feed({"error": {"message": "engine dead"}})


def test_a_request_specific_error_before_the_first_delta_ejects_nothing():
    """Only an error saying the engine is gone makes the replica suspect; any other fails just this request."""
    with pytest.raises(InternalFailure):
        StreamState("small", False).feed({"error": {"message": "the grammar could not be compiled"}})
    with pytest.raises(ReplicaFailed):
        StreamState("small", False).feed(
            {"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause."}}
        )


def test_a_restartable_request_may_go_elsewhere_even_after_its_first_delta():
    """A request whose client sees nothing until the answer is whole has shown nothing when its replica dies."""
    state = StreamState("small", False, restartable=True)
    state.feed(_chunk("a"))
    with pytest.raises(ReplicaFailed):
        state.feed({"error": {"message": "engine dead"}})
    with pytest.raises(InternalFailure):  # a request-specific error still fails just the request
        StreamState("small", False, restartable=True).feed({"error": {"message": "bad grammar"}})
