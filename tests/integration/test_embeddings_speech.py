"""Embeddings and speech to text on the shared server's demo pools (all-MiniLM-L6-v2 on vLLM's pooling runner,
Whisper tiny.en on vLLM), through the official `openai` SDK: every input and output shape, usage, receipts and
metering rows, per-tenant limits, the results cache, and a 400 (never a 500) for what cannot be served."""

from __future__ import annotations

import io
import time

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf

from tests.admin import new_tenant
from tests.conftest import API_KEY, MAX_TRANSCRIPTION_SECONDS
from tests.media import speech
from tests.openai_wire import openai_client

AUTH = {"authorization": f"Bearer {API_KEY}"}
SENTENCE = "I would like a cup of coffee."  # tiny.en, greedy, hears espeak-ng say it right


def _wav(samples: np.ndarray, rate: int = 16_000) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@pytest.fixture(scope="module")
def clip() -> bytes:
    return _wav(speech(SENTENCE))


def _receipt(server, request_id: str, key: str = API_KEY) -> dict:
    for _ in range(50):  # the row is written before the response; the receipt may still be settling on a replica
        resp = httpx.get(f"{server.v1}/usage/{request_id}", headers={"authorization": f"Bearer {key}"}, timeout=10)
        if resp.status_code == 200 and resp.json()["status"] != "running":
            return resp.json()
        time.sleep(0.1)
    raise AssertionError(f"no settled receipt for {request_id}: {resp.status_code} {resp.text}")


def _prices(server) -> dict:
    from tests.admin import ADMIN

    return httpx.get(f"{server.base_url}/admin/prices", headers=ADMIN, timeout=10).json()["data"]


def _cos(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


# -- embeddings ------------------------------------------------------------------------------------------------


def test_models_list_each_pool_with_its_kind(client, server):
    kinds = {m.id: m.model_extra.get("kind") for m in client.models.list().data}
    assert kinds == {"small": "chat", "large": "chat", "minilm": "embedding", "whisper": "transcription"}
    whisper = client.models.retrieve("whisper-1").model_extra
    assert whisper["endpoints"] == ["/v1/audio/transcriptions"]  # English-only: no translations
    engines = httpx.get(server.base_url + "/health", timeout=10).json()["engines"]
    assert (engines["minilm"]["kind"], engines["minilm"]["status"]) == ("embedding", "ok")
    assert (engines["whisper"]["kind"], engines["whisper"]["status"]) == ("transcription", "ok")


def test_paraphrases_embed_closer_than_unrelated_text(client):
    texts = ["A cat is sleeping on the sofa.", "The kitten naps on the couch.", "Interest rates rose in March."]
    resp = client.embeddings.create(model="minilm", input=texts, encoding_format="float")
    vectors = [d.embedding for d in sorted(resp.data, key=lambda d: d.index)]
    assert [len(v) for v in vectors] == [384, 384, 384]
    assert all(abs(np.linalg.norm(v) - 1) < 1e-4 for v in vectors)  # the pooler normalises
    assert _cos(vectors[0], vectors[1]) > _cos(vectors[0], vectors[2]) + 0.3
    assert resp.model == "minilm"
    assert resp.object == "list"


def test_usage_is_the_tokenizers_count_and_matches_the_reference_model(client):
    from transformers import AutoTokenizer

    from grounding.models import MiniLMEmbedder, default_minilm_dir

    tokenizer = AutoTokenizer.from_pretrained(default_minilm_dir())
    texts = ["Hello there, world.", "Embeddings through Tessera."]
    resp = client.embeddings.create(model="embed", input=texts)  # the SDK asks for base64 and decodes it
    assert resp.usage.prompt_tokens == sum(len(tokenizer(t)["input_ids"]) for t in texts) == resp.usage.total_tokens
    reference = MiniLMEmbedder(default_minilm_dir())
    try:
        expected = reference.embed(texts)
    finally:
        reference.close()
    got = np.array([d.embedding for d in sorted(resp.data, key=lambda d: d.index)], dtype=np.float32)
    assert np.abs(got - expected).max() < 1e-5


def test_token_id_inputs_and_base64_output(client, server):
    ids = [[101, 7592, 2088, 102], [101, 2088, 102]]
    raw = httpx.post(
        f"{server.v1}/embeddings",
        headers=AUTH,
        json={"model": "minilm", "input": ids, "encoding_format": "base64"},
        timeout=60,
    )
    assert raw.status_code == 200, raw.text
    body = raw.json()
    assert body["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    as_floats = client.embeddings.create(model="minilm", input=ids, encoding_format="float")
    import base64

    for item, floats in zip(body["data"], as_floats.data, strict=True):
        decoded = np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4")
        assert np.allclose(decoded, floats.embedding, atol=1e-6)
    single = client.embeddings.create(model="minilm", input=[101, 7592, 2088, 102], encoding_format="float")
    assert np.allclose(single.data[0].embedding, as_floats.data[0].embedding, atol=1e-6)
    receipt = _receipt(server, raw.headers["x-request-id"])
    assert (receipt["endpoint"], receipt["model"], receipt["tokens"]["text"]) == ("embeddings", "minilm", 7)
    assert receipt["cost_micros"] == 7 * 150_000 // 1_000_000  # text input at the default price


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "minilm", "input": "x", "dimensions": 64}, 400, "dimensions"),
        ({"model": "minilm", "input": "word " * 600}, 400, "input"),
        ({"model": "minilm", "input": [[101, 999999]]}, 400, "input"),
        ({"model": "minilm", "input": []}, 400, "input"),
        ({"model": "small", "input": "x"}, 400, "model"),
        ({"model": "nope", "input": "x"}, 404, "model"),
        ({"input": "x"}, 400, "model"),
    ],
)
def test_embedding_requests_that_cannot_run_name_their_field(server, body, status, param):
    resp = httpx.post(f"{server.v1}/embeddings", headers=AUTH, json=body, timeout=30)
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["param"] == param


def test_a_chat_request_to_an_embedding_pool_is_a_400_naming_model(client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="minilm", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert refused.value.body["param"] == "model"
    assert "/v1/embeddings" in refused.value.body["message"]


def test_tenant_limits_apply_to_embeddings(server):
    limited = openai_client(server.v1, new_tenant(server, "emb", tokens_per_minute=20), timeout=60)
    limited.embeddings.create(model="minilm", input="short text")
    with pytest.raises(openai.RateLimitError):
        limited.embeddings.create(model="minilm", input=["a much longer text that takes many tokens"] * 4)
    budget = openai_client(server.v1, new_tenant(server, "embb", monthly_token_budget=5), timeout=60)
    with pytest.raises(openai.RateLimitError) as spent:
        budget.embeddings.create(model="minilm", input="this needs more than five tokens")
    assert spent.value.body["code"] == "insufficient_quota"


# -- speech to text --------------------------------------------------------------------------------------------


def _words(text: str) -> set[str]:
    return {w.strip(".,!?").lower() for w in text.split()}


def test_transcription_json_carries_the_words_and_duration_usage(client, server, clip):
    raw = client.audio.transcriptions.with_raw_response.create(model="whisper-1", file=("s.wav", clip))
    out = raw.parse()
    assert {"cup", "coffee"} <= _words(out.text), out.text
    assert out.usage.type == "duration"
    assert out.usage.seconds >= 1
    receipt = _receipt(server, raw.headers["x-request-id"])
    assert receipt["endpoint"] == "transcriptions"
    assert receipt["model"] == "whisper"
    seconds = len(sf.read(io.BytesIO(clip))[0]) / 16_000
    assert abs(receipt["audio_seconds"] - seconds) < 0.01
    assert receipt["tokens"]["audio"] == int(np.ceil(seconds * 50))
    assert receipt["tokens"]["output"] > 0
    price = _prices(server)["whisper"]["audio_seconds"]  # per million seconds
    assert receipt["cost_micros"] == int(np.ceil(seconds)) * price // 1_000_000


def test_every_response_format(client, clip):
    temperature = 0.2  # sampled, so the results cache stays out of this test
    text = client.audio.transcriptions.create(
        model="whisper", file=("s.wav", clip), response_format="text", temperature=0.0
    )
    assert isinstance(text, str)
    assert "coffee" in text.lower()
    srt = client.audio.transcriptions.create(model="whisper", file=("s.wav", clip), response_format="srt")
    assert srt.startswith("1\n00:00:0")
    assert " --> " in srt
    assert "coffee" in srt.lower()
    vtt = client.audio.transcriptions.create(model="whisper", file=("s.wav", clip), response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:0")
    verbose = client.audio.transcriptions.create(
        model="whisper", file=("s.wav", clip), response_format="verbose_json", temperature=temperature
    )
    assert verbose.language == "english"
    assert verbose.duration > 1
    assert verbose.segments
    assert verbose.segments[0].start >= 0
    assert verbose.segments[-1].end <= verbose.duration + 0.5
    assert all(s.avg_logprob is not None and s.avg_logprob <= 0 for s in verbose.segments)
    # Whisper's probability of its no-speech token, read at the start of a window of clear speech
    assert all(s.no_speech_prob is not None and 0 <= s.no_speech_prob < 0.5 for s in verbose.segments), [
        s.no_speech_prob for s in verbose.segments
    ]
    assert "".join(s.text for s in verbose.segments).strip() == verbose.text


def test_streamed_transcript_events(client, clip):
    stream = client.audio.transcriptions.create(model="whisper", file=("s.wav", clip), stream=True)
    events = list(stream)
    deltas = [e for e in events if e.type == "transcript.text.delta"]
    done = [e for e in events if e.type == "transcript.text.done"]
    assert len(deltas) > 1
    assert len(done) == 1
    assert events[-1].type == "transcript.text.done"
    assert "".join(d.delta for d in deltas).strip() == done[0].text
    assert "coffee" in done[0].text.lower()


def test_the_same_file_is_transcribed_once_per_tenant(server, clip):
    key = new_tenant(server, "stt")
    tenant = openai_client(server.v1, key, timeout=60)
    audio = _wav(speech("Please call me back tomorrow morning."))
    first = tenant.audio.transcriptions.with_raw_response.create(model="whisper", file=("a.wav", audio))
    second = tenant.audio.transcriptions.with_raw_response.create(model="whisper", file=("b.wav", audio))
    assert first.parse().text == second.parse().text
    fresh = _receipt(server, first.headers["x-request-id"], key)
    cached = _receipt(server, second.headers["x-request-id"], key)
    assert (fresh["cached"], cached["cached"]) == (False, True)
    prices = _prices(server)["whisper"]
    seconds = int(np.ceil(fresh["audio_seconds"]))
    assert fresh["cost_micros"] == seconds * prices["audio_seconds"] // 1_000_000
    assert cached["cost_micros"] == seconds * prices["cached_audio_seconds"] // 1_000_000  # a tenth, by default
    assert cached["total_latency_ms"] < fresh["total_latency_ms"]
    other_key = new_tenant(server, "stt2")
    other = openai_client(server.v1, other_key, timeout=60)
    third = other.audio.transcriptions.with_raw_response.create(model="whisper", file=("a.wav", audio))
    assert _receipt(server, third.headers["x-request-id"], other_key)["cached"] is False  # never another tenant's


@pytest.mark.parametrize("case", ["too_long", "mismatched", "garbage", "empty", "no_model", "wrong_kind", "format"])
def test_audio_that_cannot_be_transcribed_is_a_400(server, clip, case):
    files = {"file": ("s.wav", clip)}
    data = {"model": "whisper"}
    if case == "too_long":
        files = {"file": ("long.wav", _wav(np.zeros(16_000 * (MAX_TRANSCRIPTION_SECONDS + 2), dtype=np.float32)))}
    elif case == "mismatched":
        files = {"file": ("s.mp3", clip)}
    elif case == "garbage":
        files = {"file": ("s.wav", b"RIFF....not a wave file at all")}
    elif case == "empty":
        files = {"file": ("s.wav", b"")}
    elif case == "no_model":
        data = {}
    elif case == "wrong_kind":
        data = {"model": "small"}
    elif case == "format":
        data = {"model": "whisper", "response_format": "docx"}
    resp = httpx.post(f"{server.v1}/audio/transcriptions", headers=AUTH, files=files, data=data, timeout=60)
    assert resp.status_code == 400, resp.text
    expected = {"no_model": "model", "wrong_kind": "model", "format": "response_format"}.get(case, "file")
    assert resp.json()["error"]["param"].split(".")[0] == expected


def test_an_english_only_pool_refuses_translation(client, clip):
    with pytest.raises(openai.BadRequestError) as refused:
        client.audio.translations.create(model="whisper", file=("s.wav", clip))
    assert refused.value.body["param"] == "model"
