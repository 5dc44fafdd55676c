"""A transcription pool served by remote vLLM replicas of a Whisper-class checkpoint: the speech engine interface
over the chat fleet's remote engine (`serving.engines.remote`), so the same endpoint picker, scraping, ejection,
retries and wire format serve it.

Each window goes to a replica's `/inference/v1/generate` as a token-in/token-out request: the decoder prompt
Tessera built as `token_ids`, the window's samples as one `audio_url` content part (a float WAV data URL, which the
replica's Whisper processor turns into log-mel features as the in-process engine's does), and the window's sampling
parameters (max tokens, temperature, seed, logit bias, logprobs) as vLLM `SamplingParams` fields. vLLM serves that
endpoint for Whisper only with the task `generate`, which Tessera's vLLM plugin (`serving.engines.vllm_patches`)
declares; a replica therefore runs from an environment with Tessera installed.

A window whose client sees nothing until the transcript is whole (`SpeechRequest.restartable`) is restarted from
the start on another replica when its replica fails, even mid-window; a streamed one only before its first delta.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from serving.engines.base import EngineCapacity, EngineDelta, EngineRequest, SpeechRequest
from serving.engines.remote import RemoteEngine, RemoteSettings

SAMPLE_RATE = 16_000  # SpeechRequest.samples are 16 kHz mono


def engine_decoder_prompt(decoder_token_ids: tuple[int, ...], decoder_start: int | None) -> tuple[int, ...]:
    """The decoder prompt as vLLM's engine runs it in process: an encoder-decoder prompt whose decoder part does not
    open with the decoder start token gets it put in front (`build_enc_dec_input`). The token-in/token-out endpoint
    takes the prompt as a single one and adds nothing, so the gateway adds it, and both engines decode alike."""
    if decoder_start is None or (decoder_token_ids and decoder_token_ids[0] == decoder_start):
        return decoder_token_ids
    return (decoder_start, *decoder_token_ids)


def window_request(request: SpeechRequest, decoder_start: int | None) -> EngineRequest:
    """One window as a remote engine request: raw audio (the replica encodes it) and the decoder prompt as ids."""
    return EngineRequest(
        request_id=request.request_id,
        prompt="",
        images=[],
        audios=[(request.samples, SAMPLE_RATE)],
        params=request.params,
        priority=request.priority,
        prompt_token_ids=engine_decoder_prompt(request.decoder_token_ids, decoder_start),
        restartable=request.restartable,
    )


class RemoteSpeechEngine:
    """A transcription pool on remote replicas, each window sent to the replica the pool's picker chooses."""

    def __init__(self, remote: RemoteEngine) -> None:
        self._remote = remote
        self.name = remote.name
        self.model_path = remote.model_path
        self.capacity: EngineCapacity = remote.capacity
        self._decoder_start = getattr(remote.hf_config(), "decoder_start_token_id", None)

    @classmethod
    async def connect(cls, name: str, checkpoint: Path, settings: RemoteSettings) -> RemoteSpeechEngine:
        """Load the checkpoint's config and tokenizer and wait (up to `startup_wait_s`) for a first replica."""
        return cls(await RemoteEngine.connect(name, checkpoint, settings))

    async def close(self) -> None:
        await self._remote.close()

    def shutdown(self) -> None:
        """The replicas belong to the operator and keep running; `close` releases the gateway's side."""

    def replicas(self) -> list[dict[str, Any]]:
        return self._remote.replicas()

    def hf_config(self) -> Any:
        return self._remote.hf_config()

    def tokenizer(self) -> Any:
        return self._remote.tokenizer()

    def is_healthy(self) -> bool:
        return self._remote.is_healthy()

    async def abort(self, request_id: str) -> None:
        await self._remote.abort(request_id)

    async def transcribe(self, request: SpeechRequest) -> AsyncIterator[EngineDelta]:
        async for delta in self._remote.generate(window_request(request, self._decoder_start)):
            yield delta
