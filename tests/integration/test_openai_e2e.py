"""End to end with the official openai SDK against a live server on real vLLM engines."""

from __future__ import annotations

import pytest

from tests import media


def _user(*parts):
    return [{"role": "user", "content": list(parts)}]


def _text(t):
    return {"type": "text", "text": t}


def _img(seed=0, size=(320, 240)):
    return {"type": "image_url", "image_url": {"url": media.png_data_url(seed, size)}}


def _audio(seconds=2.0, rate=16000, fmt="WAV"):
    return {"type": "input_audio", "input_audio": {"data": media.audio_b64(seconds, rate, fmt), "format": fmt.lower()}}


def _ask(client, messages, model="small", **kw):
    kw.setdefault("max_tokens", 6)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=model, messages=messages, **kw)


def _details(resp):
    return resp.usage.prompt_tokens_details


def test_models_lists_pools_with_modalities(client):
    models = {m.id: m.model_extra for m in client.models.list().data}
    assert set(models) == {"small", "large", "minilm", "whisper"}
    assert [models[m]["kind"] for m in ("small", "large", "minilm", "whisper")] == [
        "chat",
        "chat",
        "embedding",
        "transcription",
    ]
    assert models["small"]["modalities"] == ["text", "image", "audio"]
    assert models["large"]["modalities"] == ["text", "image"]
    assert models["small"]["max_model_len"] == 4096
    assert client.models.retrieve("8b").id == "small"


@pytest.mark.parametrize("model", ["small", "large"])
def test_text(client, model):
    resp = _ask(
        client, [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Hi"}], model=model
    )
    assert resp.model == model
    assert resp.object == "chat.completion"
    assert resp.choices[0].finish_reason in ("stop", "length")
    d = _details(resp)
    assert (d.image_tokens, d.audio_tokens) == (0, 0)
    assert d.text_tokens == resp.usage.prompt_tokens > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_large_answers_sensibly(client):
    resp = _ask(client, [{"role": "user", "content": "What is the capital of France?"}], model="large", max_tokens=16)
    assert "Paris" in resp.choices[0].message.content


def test_image_data_url(client):
    resp = _ask(client, _user(_text("What is this?"), _img()))
    assert _details(resp).image_tokens == 54  # 320x240 under a 224x224 pixel budget: 9x6 merged patches


@pytest.mark.parametrize(("rate", "fmt"), [(16000, "WAV"), (44100, "WAV"), (16000, "MP3")])
def test_audio_formats_and_rates(client, rate, fmt):
    resp = _ask(client, _user(_text("Listen."), _audio(2.0, rate, fmt)))
    d = _details(resp)
    assert d.audio_tokens == 50  # 2 s at 25 tokens/s, whatever the source rate
    assert d.image_tokens == 0


def test_image_audio_text_together(client):
    resp = _ask(client, _user(_text("Compare"), _img(1), _text("with"), _audio()))
    d = _details(resp)
    assert (d.image_tokens, d.audio_tokens) == (54, 50)
    assert d.text_tokens + d.image_tokens + d.audio_tokens == resp.usage.prompt_tokens


def test_two_identical_images_cost_exactly_twice_one(client):
    one = _details(_ask(client, _user(_text("a"), _img(5))))
    two = _details(_ask(client, _user(_text("a"), _img(5), _img(5))))
    assert two.image_tokens == 2 * one.image_tokens


def test_streaming_with_include_usage(client):
    stream = client.chat.completions.create(
        model="small",
        messages=_user(_text("Describe"), _img(2)),
        max_tokens=5,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.usage is None for c in chunks[:-1])
    final = chunks[-1]
    assert final.choices == []
    assert final.usage.completion_tokens == 5
    assert final.usage.prompt_tokens_details.image_tokens == 54
    reasons = [c.choices[0].finish_reason for c in chunks[:-1] if c.choices[0].finish_reason]
    assert reasons == ["length"]
    text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
    whole = _ask(client, _user(_text("Describe"), _img(2)), max_tokens=5, extra_body={"ignore_eos": True})
    assert text == whole.choices[0].message.content


def test_streaming_without_usage_has_no_usage_field(client):
    chunks = list(_ask(client, [{"role": "user", "content": "hi"}], stream=True))
    assert chunks
    assert all(c.usage is None for c in chunks)


def test_parameters_are_honoured(client):
    base = {"messages": [{"role": "user", "content": "Count"}], "max_tokens": 12}
    a = _ask(client, temperature=1.0, top_p=0.9, seed=7, **base)
    b = _ask(client, temperature=1.0, top_p=0.9, seed=7, **base)
    assert a.choices[0].message.content == b.choices[0].message.content  # seeded sampling repeats
    limited = _ask(
        client, [{"role": "user", "content": "Count"}], max_completion_tokens=3, extra_body={"ignore_eos": True}
    )
    assert limited.usage.completion_tokens == 3
    assert limited.choices[0].finish_reason == "length"
    penalised = _ask(client, presence_penalty=1.5, frequency_penalty=1.0, **base)
    assert penalised.usage.completion_tokens >= 1


def test_stop_sequence_ends_generation(client):
    probe = _ask(client, [{"role": "user", "content": "Go"}], max_tokens=8, extra_body={"ignore_eos": True})
    text = probe.choices[0].message.content
    stop = text.strip().split()[1] if len(text.split()) > 1 else text.strip()[:2]
    stopped = _ask(
        client, [{"role": "user", "content": "Go"}], max_tokens=8, stop=[stop], extra_body={"ignore_eos": True}
    )
    assert stopped.choices[0].finish_reason == "stop"
    assert stop not in stopped.choices[0].message.content
    assert stopped.usage.completion_tokens < 8


def test_n_beyond_what_is_served_is_refused_clearly(client):
    import openai

    with pytest.raises(openai.BadRequestError) as exc:
        _ask(client, [{"role": "user", "content": "x"}], n=17)
    assert exc.value.body["param"] == "n"
