"""Greedy float32 completions from the server equal transformers.generate on the same checkpoint and inputs."""

from __future__ import annotations

import pytest

from tests import media
from tests.integration import reference

MAX_TOKENS = 8


def _case(name):
    img_a, img_b = media.image(11), media.image(12, (256, 200))
    audio = media.tone(2.0, 16000)
    txt = {"type": "text", "text": "Describe what you get."}
    part_a = {"type": "image_url", "image_url": {"url": media.data_url(media.png_bytes(img_a))}}
    part_b = {"type": "image_url", "image_url": {"url": media.data_url(media.png_bytes(img_b))}}
    part_audio = {"type": "input_audio", "input_audio": {"data": media.audio_b64(2.0, 16000), "format": "wav"}}
    cases = {
        "text": ([txt], [], []),
        "image": ([part_a, txt], [img_a], []),
        "audio": ([part_audio, txt], [], [audio]),
        "image+audio": ([txt, part_a, part_audio], [img_a], [audio]),
        "two-images-interleaved": ([part_a, {"type": "text", "text": "versus"}, part_b, txt], [img_a, img_b], []),
    }
    parts, images, audios = cases[name]
    return [{"role": "system", "content": "You look closely."}, {"role": "user", "content": parts}], images, audios


def _server_greedy(client, model, messages):
    resp = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=MAX_TOKENS,
        temperature=0,
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )
    return resp, resp.model_extra["prompt_token_ids"], resp.choices[0].model_extra["token_ids"]


@pytest.mark.parametrize("case", ["text", "image", "audio", "image+audio", "two-images-interleaved"])
def test_small_matches_transformers(client, case):
    messages, images, audios = _case(case)
    resp, prompt_ids, token_ids = _server_greedy(client, "small", messages)
    ref_prompt, ref_tokens = reference.greedy("small", messages, images, audios, MAX_TOKENS)
    assert prompt_ids == ref_prompt
    assert token_ids == ref_tokens
    counts = reference.media_token_counts("small", ref_prompt)
    details = resp.usage.prompt_tokens_details
    assert (details.image_tokens, details.audio_tokens) == (counts["image"], counts["audio"])
    assert resp.usage.prompt_tokens == len(ref_prompt)


@pytest.mark.parametrize("case", ["text", "image"])
def test_large_matches_transformers(client, case):
    messages, images, audios = _case(case)
    _, prompt_ids, token_ids = _server_greedy(client, "large", messages)
    ref_prompt, ref_tokens = reference.greedy("large", messages, images, audios, MAX_TOKENS)
    assert prompt_ids == ref_prompt
    assert token_ids == ref_tokens


def test_swapping_interleaved_images_changes_the_prompt(client):
    messages, _, _ = _case("two-images-interleaved")
    _, ids_ab, tokens_ab = _server_greedy(client, "small", messages)
    parts = messages[1]["content"]
    swapped = [*messages[:1], {"role": "user", "content": [parts[2], parts[1], parts[0], parts[3]]}]
    _, ids_ba, _ = _server_greedy(client, "small", swapped)
    _, again_ids, again_tokens = _server_greedy(client, "small", messages)
    assert ids_ab != ids_ba  # image sizes differ, so the placeholder runs move with the images
    assert (again_ids, again_tokens) == (ids_ab, tokens_ab)


@pytest.fixture(scope="module")
def large_with_audio(large_server):
    from tests.conftest import API_KEY
    from tests.openai_wire import openai_client

    return openai_client(large_server.v1, API_KEY, timeout=120)


@pytest.mark.parametrize("case", ["audio", "image+audio"])
def test_large_hears_as_transformers_does(large_with_audio, case):
    messages, images, audios = _case(case)
    resp, prompt_ids, token_ids = _server_greedy(large_with_audio, "large", messages)
    ref_prompt, ref_tokens = reference.greedy("large", messages, images, audios, MAX_TOKENS)
    assert prompt_ids == ref_prompt
    assert token_ids == ref_tokens
    assert resp.usage.prompt_tokens_details.audio_tokens == reference.media_token_counts("large", ref_prompt)["audio"]
