"""The multimodal pipeline on live engines: embedding cache, ordered fusion, routing, admission metrics."""

from __future__ import annotations

import httpx

from tests import media
from tests.integration.test_lifecycle import _metric

MAX_TOKENS = 8


def _greedy(client, parts, model="small"):
    resp = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": parts}],
        max_tokens=MAX_TOKENS,
        temperature=0,
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )
    return resp, resp.choices[0].model_extra["token_ids"], resp.model_extra["prompt_token_ids"]


def _img(seed, size=(320, 240)):
    return {"type": "image_url", "image_url": {"url": media.png_data_url(seed, size)}}


def test_cache_hit_gives_the_same_tokens_as_the_miss(server, client):
    hits_before = _metric(server, "tessera_embedding_cache_lookups_total", kind="image", outcome="hit")
    parts = [{"type": "text", "text": "What is this?"}, _img(101), _img(102)]
    miss, miss_tokens, miss_prompt = _greedy(client, parts)
    hit, hit_tokens, hit_prompt = _greedy(client, parts)
    assert miss.usage.prompt_tokens_details.model_extra["cached_image_tokens"] == 0
    assert hit.usage.prompt_tokens_details.model_extra["cached_image_tokens"] == 108
    assert (hit_tokens, hit_prompt) == (miss_tokens, miss_prompt)
    # Each image is looked up for the small pool's own tower and for the large pool's, whose label head detects
    # what grounding checks the answer against (the small tower has none).
    towers = 2
    hits = _metric(server, "tessera_embedding_cache_lookups_total", kind="image", outcome="hit")
    assert hits == hits_before + 2 * towers


def test_cached_audio_features_give_the_same_tokens(client):
    parts = [
        {"type": "text", "text": "Hear this."},
        {"type": "input_audio", "input_audio": {"data": media.audio_b64(1.5, 22050), "format": "wav"}},
    ]
    miss, miss_tokens, _ = _greedy(client, parts)
    hit, hit_tokens, _ = _greedy(client, parts)
    assert (
        hit.usage.prompt_tokens_details.model_extra["cached_audio_tokens"]
        == hit.usage.prompt_tokens_details.audio_tokens
    )
    assert miss.usage.prompt_tokens_details.model_extra["cached_audio_tokens"] == 0
    assert hit_tokens == miss_tokens


def test_interleaved_images_land_in_order(client):
    a, b = _img(201), _img(202)  # same size: only their order differs
    text = {"type": "text", "text": "first, then"}
    _, ab, ab_prompt = _greedy(client, [a, text, b])
    _, ba, ba_prompt = _greedy(client, [b, text, a])
    _, ab_again, _ = _greedy(client, [a, text, b])
    assert ab_prompt == ba_prompt  # same placeholders...
    assert ab != ba  # ...but the images' content arrives where the client put it
    assert ab_again == ab


def test_auto_routes_and_reports_the_pool(client):
    simple = client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert simple.model == "small"
    hard = client.chat.completions.create(
        model="auto", max_tokens=2, messages=[{"role": "user", "content": "Explain step by step why the sky is blue."}]
    )
    assert hard.model == "large"
    # The large pool takes no audio here, so auto never sends audio there, however complex the text.
    audio = client.chat.completions.create(
        model="auto",
        max_tokens=2,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Explain step by step what you hear."},
                    {"type": "input_audio", "input_audio": {"data": media.audio_b64(), "format": "wav"}},
                ],
            }
        ],
    )
    assert audio.model == "small"


def test_admission_state_is_exported_and_released(server, client):
    client.chat.completions.create(model="small", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    text = httpx.get(server.base_url + "/metrics").text
    assert 'tessera_admission_blocks_budget{model="small"}' in text
    assert _metric(server, "tessera_admission_blocks_in_use", model="small") == 0
    assert _metric(server, "tessera_encoder_items_total", model="small", kind="image") >= 1
