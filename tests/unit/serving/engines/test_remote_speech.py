"""A transcription pool on remote replicas: the `/inference/v1/generate` request each window becomes, and a window
whose replica dies mid-answer restarted whole on the other one (fake replicas behind httpx.MockTransport)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
import soundfile as sf

from serving.engines.base import EngineCapacity, GenerationParams, SpeechRequest
from serving.engines.fleet import EndpointPicker
from serving.engines.remote import GENERATE_PATH, RemoteEngine
from serving.engines.remote_speech import RemoteSpeechEngine, engine_decoder_prompt
from serving.errors import EngineUnavailable

START, PREVIOUS, NO_TIMESTAMPS, NO_SPEECH, END = 50257, 50360, 50362, 50361, 50256
CONFIG = SimpleNamespace(architectures=["WhisperForConditionalGeneration"], decoder_start_token_id=START)
SAMPLES = (np.sin(np.arange(16_000) / 7) * 0.3).astype(np.float32)


def _chunk(text: str, ids: list[int], finish: str | None = None, **extra) -> bytes:
    choice = {"index": 0, "text": text, "token_ids": ids, "finish_reason": finish}
    choice["logprobs"] = {"content": [{"token": text, "logprob": -0.5, "top_logprobs": []} for _ in ids]}
    return f"data: {json.dumps({'choices': [choice], **extra})}\n\n".encode()


ANSWER = [
    _chunk(" Hello", [15496], prompt_token_ids=[START, NO_TIMESTAMPS]),
    _chunk(" there.", [612, 13]),
    _chunk("", [END], "stop"),
    b'data: {"choices": [], "usage": {"prompt_tokens_details": {"cached_tokens": 0}}}\n\n',
    b"data: [DONE]\n\n",
]


class _Broken(httpx.AsyncByteStream):
    """A stream that delivers its first chunk and then loses the connection, as a replica killed mid-answer does."""

    async def __aiter__(self):
        yield ANSWER[0]
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")


class Replicas:
    """Two fake replicas; `dying` names the one whose answers break after their first chunk."""

    def __init__(self) -> None:
        self.urls = ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]
        self.dying: str | None = None
        self.bodies: list[tuple[str, dict]] = []

    async def handler(self, request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        assert request.url.path == GENERATE_PATH
        self.bodies.append((base, json.loads(request.content)))
        if base == self.dying:
            return httpx.Response(200, stream=_Broken())
        return httpx.Response(200, content=b"".join(ANSWER), headers={"content-type": "text/event-stream"})

    def engine(self) -> RemoteSpeechEngine:
        client = httpx.AsyncClient(transport=httpx.MockTransport(self.handler))
        remote = RemoteEngine(
            "whisper",
            "/models/whisper",
            EndpointPicker("whisper", self.urls, client),
            client,
            hf_config=CONFIG,
            tokenizer=None,
            capacity=EngineCapacity(num_blocks=340, block_size=128, max_model_len=448),
            media_token_ids={},
        )
        return RemoteSpeechEngine(remote)


def _window(prompt: tuple[int, ...] = (START, NO_TIMESTAMPS), **kw) -> SpeechRequest:
    params = kw.pop("params", GenerationParams(max_tokens=222, temperature=0.0, seed=7, logprobs=0))
    return SpeechRequest("tr-1-0", SAMPLES, prompt, params, **kw)


async def _transcribe(engine: RemoteSpeechEngine, request: SpeechRequest) -> list:
    return [delta async for delta in engine.transcribe(request)]


def test_the_decoder_prompt_is_what_the_in_process_engine_runs():
    """vLLM puts the decoder start token in front of an encoder-decoder prompt that lacks it; the remote path adds
    it itself, since the token-in/token-out endpoint takes the prompt as it is."""
    assert engine_decoder_prompt((START, NO_TIMESTAMPS), START) == (START, NO_TIMESTAMPS)
    assert engine_decoder_prompt((PREVIOUS, 314, START, NO_TIMESTAMPS), START) == (
        START,
        PREVIOUS,
        314,
        START,
        NO_TIMESTAMPS,
    )
    assert engine_decoder_prompt((PREVIOUS, 314), None) == (PREVIOUS, 314)


def test_a_window_becomes_a_token_in_token_out_request_with_its_audio_and_sampling():
    replicas = Replicas()
    engine = replicas.engine()
    deltas = asyncio.run(_transcribe(engine, _window()))
    assert "".join(d.text for d in deltas) == " Hello there."
    assert [t for d in deltas for t in d.token_ids] == [15496, 612, 13, END]
    assert [lp.logprob for d in deltas for lp in d.logprobs or ()] == [-0.5] * 4
    assert deltas[-1].finish_reason == "stop"
    (_, body), *_ = replicas.bodies
    assert body["token_ids"] == [START, NO_TIMESTAMPS]
    assert (body["stream"], body["return_token_ids"], body["output_mode"]) == (True, True, "text")
    sampling = body["sampling_params"]
    assert (sampling["max_tokens"], sampling["temperature"], sampling["seed"], sampling["logprobs"]) == (222, 0.0, 7, 0)
    assert "logit_bias" not in sampling
    (part,) = body["content_parts"]
    assert part["type"] == "audio_url"
    assert part["url"].startswith("data:audio/wav;base64,")
    samples, rate = sf.read(io.BytesIO(base64.b64decode(part["url"].split(",", 1)[1])), dtype="float32")
    assert rate == 16_000
    assert np.array_equal(samples, SAMPLES)  # a float WAV: the replica's processor sees the very samples


def test_the_no_speech_probe_sends_its_bias():
    replicas = Replicas()
    probe = GenerationParams(max_tokens=1, temperature=0.0, logprobs=0, logit_bias={NO_SPEECH: 100.0})
    asyncio.run(_transcribe(replicas.engine(), _window((START,), params=probe)))
    (_, body), *_ = replicas.bodies
    assert body["token_ids"] == [START]
    assert body["sampling_params"]["logit_bias"] == {str(NO_SPEECH): 100.0}
    assert body["sampling_params"]["max_tokens"] == 1


def test_a_restartable_window_whose_replica_dies_mid_answer_is_answered_whole_by_the_other():
    replicas = Replicas()
    replicas.dying = replicas.urls[0]  # idle replicas tie, and the first listed is picked first
    engine = replicas.engine()
    deltas = asyncio.run(_transcribe(engine, _window(restartable=True)))
    assert "".join(d.text for d in deltas) == " Hello there."  # the dead replica's " Hello" is not repeated
    assert [base for base, _ in replicas.bodies] == replicas.urls
    assert replicas.bodies[0][1] == replicas.bodies[1][1]  # the same request, from the start
    assert [r["state"] for r in engine.replicas()] == ["ejected", "up"]


def test_a_streamed_window_is_not_restarted_after_its_first_delta():
    replicas = Replicas()
    replicas.dying = replicas.urls[0]
    with pytest.raises(EngineUnavailable):
        asyncio.run(_transcribe(replicas.engine(), _window(restartable=False)))
    assert [base for base, _ in replicas.bodies] == replicas.urls[:1]
