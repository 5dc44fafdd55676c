"""The speech endpoints' one path, shared by `/v1/audio/transcriptions`, `/v1/audio/translations` and the console's
playground: read the form, decode the audio with chat's limits and codec checks, answer from the tenant's results
cache or run the windows on the pool's engine under one lease, and render the asked format (or stream it).

Usage: a transcription is billed per second of audio (`audio_seconds`, or `cached_audio_seconds` for a transcript
from the results cache) and counts against token quotas as the pool's audio tokens per second plus its output.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from api.audio.formats import MEDIA_TYPES, RESPONSE_FORMATS, TIMED_FORMATS, render, usage
from api.errors import to_api_error
from api.sse import sse
from serving.engines.base import SpeechRequest
from serving.errors import InvalidRequest, MediaError, PayloadTooLarge
from serving.media.audio import AudioLoader, LoadedAudio
from serving.pools import TaskPool
from serving.record import TokenUsage
from serving.speech import (
    MAX_WINDOW_TOKENS,
    SAMPLE_RATE,
    SpeechOptions,
    SpeechTokens,
    WindowResult,
    check_options,
    decode_window,
    decoder_prompt,
    no_speech_params,
    no_speech_probability,
    no_speech_prompt,
    segments,
    window_params,
    windows,
)
from serving.task_lease import TaskLease, TaskService
from storage.transcripts import TranscriptStore, transcript_key
from tenancy.directory import Principal
from tenancy.quotas import QuotaGate

logger = logging.getLogger(__name__)

# What a file's name says it holds, and what the audio loader calls that container.
EXTENSIONS = {"wav": "wav", "wave": "wav", "mp3": "mp3", "mpga": "mp3", "mpeg": "mp3", "flac": "flac", "ogg": "ogg"}


@dataclass(frozen=True)
class SpeechForm:
    """A transcription or translation request, as the form sent it."""

    endpoint: str  # transcriptions | translations
    audio: bytes
    filename: str
    model: str
    language: str | None = None
    prompt: str = ""
    response_format: str = "json"
    temperature: float = 0.0
    stream: bool = False


def _text(form: dict[str, Any], name: str) -> str | None:
    value = form.get(name)
    if value is None or isinstance(value, str):
        return value
    raise InvalidRequest(f"`{name}` must be a text field", param=name)


def read_form(form: dict[str, Any], endpoint: str, raw: bytes | None, filename: str | None) -> SpeechForm:
    """The form's fields checked, each error naming its field (the file's bytes are read by the caller)."""
    if raw is None:
        raise InvalidRequest("the form has no `file` part", param="file", code="missing_field")
    model = _text(form, "model")
    if not model:
        raise InvalidRequest("missing required field 'model'", param="model", code="missing_field")
    response_format = _text(form, "response_format") or "json"
    if response_format not in RESPONSE_FORMATS:
        raise InvalidRequest(
            f"response_format must be one of {', '.join(RESPONSE_FORMATS)}; got {response_format!r}",
            param="response_format",
        )
    try:
        temperature = float(_text(form, "temperature") or 0.0)
    except ValueError:
        raise InvalidRequest("temperature must be a number", param="temperature") from None
    if not 0.0 <= temperature <= 1.0 or not math.isfinite(temperature):
        raise InvalidRequest("temperature must lie in [0, 1]", param="temperature")
    stream = (_text(form, "stream") or "false").lower()
    if stream not in ("true", "false"):
        raise InvalidRequest("stream must be true or false", param="stream")
    if stream == "true" and response_format not in ("json", "text"):
        raise InvalidRequest(
            "a streamed transcript is text; response_format must be json or text", param="response_format"
        )
    granularities = form.get("timestamp_granularities[]") or form.get("timestamp_granularities")
    if granularities and "word" in (granularities if isinstance(granularities, list) else [granularities]):
        raise InvalidRequest("word timestamps are not supported; use segment", param="timestamp_granularities")
    language = (_text(form, "language") or "").strip().lower() or None
    if endpoint == "translations":
        language = None  # a translation is into English, from whatever was spoken
    return SpeechForm(
        endpoint=endpoint,
        audio=raw,
        filename=filename or "audio",
        model=model,
        language=language,
        prompt=(_text(form, "prompt") or "").strip(),
        response_format=response_format,
        temperature=temperature,
        stream=stream == "true",
    )


def audio_format(filename: str) -> str:
    ext = PurePath(filename).suffix.lower().lstrip(".")
    if ext not in EXTENSIONS:
        raise MediaError(
            f"the file's type {ext or '(none)'!r} is not supported; send one of {', '.join(sorted(EXTENSIONS))}",
            code="unsupported_audio_format",
            param="file",
        )
    return EXTENSIONS[ext]


@dataclass(frozen=True)
class Transcriber:
    """What the speech endpoints need from the server, bundled for the routes and the console."""

    service: TaskService
    quotas: QuotaGate
    transcripts: TranscriptStore | None
    max_seconds: float
    max_bytes: int

    def check_size(self, size: int) -> None:
        if size > self.max_bytes:
            raise PayloadTooLarge(f"an audio file may hold at most {self.max_bytes} bytes", param="file")

    async def answer(self, form: SpeechForm, principal: Principal) -> tuple[str | dict[str, Any], str, str]:
        """A whole transcript: (body, media type, request id)."""
        pool, options, audio = await self._prepare(form)
        cache_key = self._cache_key(principal, pool, form, audio)
        if cache_key is not None and self.transcripts is not None:
            hit = await asyncio.to_thread(self.transcripts.get, cache_key, str(principal.tenant_id))
            if hit is not None:
                return await self._cached(pool, form, principal, audio, hit.body, hit.output_tokens)
        tokens = SpeechTokens(pool.tokenizer)
        async with self._lease(pool, form, principal, audio) as lease:
            cut = windows(audio.samples)
            results = [WindowResult(offset, len(chunk) / SAMPLE_RATE) for offset, chunk in cut]
            prompt = decoder_prompt(pool, tokens, options)

            silence = no_speech_params(tokens) if options.timestamps else None
            start = no_speech_prompt(prompt, tokens)

            async def run(index: int, result: WindowResult, chunk: Any) -> None:
                # The client sees nothing before the transcript is whole: a window may restart on another replica.
                request = self._request(lease, pool, index, chunk, prompt, options, tokens, restartable=True)

                async def decode() -> None:
                    async for _ in decode_window(pool, request, result):
                        lease.started_output()

                async def measure() -> None:  # a timed segment carries its window's probability of no speech
                    if silence is not None:
                        asked = SpeechRequest(f"{request.request_id}-ns", chunk, start, silence, restartable=True)
                        result.no_speech_prob = await no_speech_probability(pool, asked, tokens)

                await asyncio.gather(decode(), measure())

            await asyncio.gather(
                *(run(i, r, chunk) for i, (r, (_, chunk)) in enumerate(zip(results, cut, strict=True)))
            )
            timed = segments(pool, tokens, results) if options.timestamps else []
            text = " ".join(s.text.strip() for s in timed) if timed else _joined(results)
            output = sum(len(r.token_ids) for r in results)
            lease.used, lease.answer = self._usage(pool, audio, output), text
        await lease.require_recorded()
        body, media_type = render(
            form.response_format,
            task=options.task,
            language=form.language,
            duration=audio.seconds,
            text=text,
            segments=timed,
            temperature=options.temperature,
        )
        if cache_key is not None and self.transcripts is not None:
            stored = body if isinstance(body, str) else json.dumps(body)
            await asyncio.to_thread(
                self.transcripts.put, cache_key, str(principal.tenant_id), stored, _ms(audio), output
            )
        return body, media_type, lease.request_id

    async def stream(self, form: SpeechForm, principal: Principal) -> AsyncIterator[str]:
        """The transcript as OpenAI's `transcript.text.delta` events and a final `transcript.text.done`. Refusals
        (quota, admission, bad audio) raise here, before the stream starts."""
        pool, options, audio = await self._prepare(form)
        tokens = SpeechTokens(pool.tokenizer)
        prompt = decoder_prompt(pool, tokens, options)
        held = AsyncExitStack()
        lease = await held.enter_async_context(self._lease(pool, form, principal, audio))
        return self._events(held, lease, pool, audio, options, tokens, prompt)

    async def _events(
        self,
        held: AsyncExitStack,
        lease: TaskLease,
        pool: TaskPool,
        audio: LoadedAudio,
        options: SpeechOptions,
        tokens: SpeechTokens,
        prompt: tuple[int, ...],
    ) -> AsyncIterator[str]:
        parts: list[str] = []
        output = 0
        try:
            async with held:
                for index, (offset, chunk) in enumerate(windows(audio.samples)):
                    result = WindowResult(offset, len(chunk) / SAMPLE_RATE)
                    request = self._request(lease, pool, index, chunk, prompt, options, tokens, restartable=False)
                    first = True
                    async for text in decode_window(pool, request, result):
                        lease.started_output()
                        # Windows join with a space, as whole transcripts do.
                        piece = " " + text if first and parts and not text.startswith(" ") else text
                        first = False
                        parts.append(piece)
                        yield sse({"type": "transcript.text.delta", "delta": piece})
                    output += len(result.token_ids)
                lease.used, lease.answer = self._usage(pool, audio, output), "".join(parts).strip()
            await lease.require_recorded()
        except Exception as exc:
            err = to_api_error(exc)
            logger.warning("transcription stream %s failed after it started: %s", lease.request_id, err.message)
            yield sse({"type": "error", "error": err.body()["error"]})
            return
        text = "".join(parts).strip()
        yield sse({"type": "transcript.text.done", "text": text, "usage": usage(audio.seconds)})

    # -- steps -----------------------------------------------------------------------------------------------

    async def _prepare(self, form: SpeechForm) -> tuple[TaskPool, SpeechOptions, LoadedAudio]:
        pool = self.service.pool(form.model, "transcription")
        options = SpeechOptions(
            task="translate" if form.endpoint == "translations" else "transcribe",
            language=form.language,
            prompt=form.prompt,
            temperature=form.temperature,
            timestamps=form.response_format in TIMED_FORMATS and not form.stream,
        )
        check_options(pool, options)
        fmt = audio_format(form.filename)
        loader = AudioLoader(target_rate=SAMPLE_RATE, max_seconds=self.max_seconds)
        audio = await asyncio.to_thread(loader.load_bytes, form.audio, fmt, param="file")
        return pool, options, audio

    def _cache_key(self, principal: Principal, pool: TaskPool, form: SpeechForm, audio: LoadedAudio) -> str | None:
        if self.transcripts is None or not self.transcripts.enabled or principal.tenant_id is None:
            return None
        if form.temperature != 0.0 or form.stream:
            return None  # sampled transcripts differ each time; the cache keeps greedy ones
        options = (form.endpoint, form.language or "", form.prompt, form.response_format)
        return transcript_key(str(principal.tenant_id), audio.content_hash, pool.name, *options)

    def _lease(
        self, pool: TaskPool, form: SpeechForm, principal: Principal, audio: LoadedAudio, *, admit: bool = True
    ) -> AbstractAsyncContextManager[TaskLease]:
        worst = self._usage(pool, audio, len(windows(audio.samples)) * MAX_WINDOW_TOKENS)
        return self.service.lease(
            pool, self.quotas.policy(principal), form.endpoint, worst, admit=admit, fingerprint=audio.content_hash
        )

    async def _cached(
        self, pool: TaskPool, form: SpeechForm, principal: Principal, audio: LoadedAudio, body: str, output: int
    ) -> tuple[str | dict[str, Any], str, str]:
        async with self._lease(pool, form, principal, audio, admit=False) as lease:
            used = self._usage(pool, audio, output)
            lease.used = TokenUsage(
                prompt=used.prompt,
                completion=used.completion,
                audio=used.audio,
                cached_audio=used.audio,
                audio_ms=used.audio_ms,
                cached_audio_ms=used.audio_ms,
            )
            lease.started_output()
        await lease.require_recorded()
        parsed = json.loads(body) if form.response_format in ("json", "verbose_json") else body
        return parsed, MEDIA_TYPES[form.response_format], lease.request_id

    @staticmethod
    def _usage(pool: TaskPool, audio: LoadedAudio, output: int) -> TokenUsage:
        tokens = math.ceil(audio.seconds * pool.audio_tokens_per_second)
        return TokenUsage(prompt=tokens, completion=output, audio=tokens, audio_ms=_ms(audio))

    @staticmethod
    def _request(
        lease: TaskLease,
        pool: TaskPool,
        index: int,
        chunk: Any,
        prompt: tuple[int, ...],
        options: SpeechOptions,
        tokens: SpeechTokens,
        *,
        restartable: bool,
    ) -> SpeechRequest:
        return SpeechRequest(
            request_id=f"{lease.request_id}-{index}",
            samples=chunk,
            decoder_token_ids=prompt,
            params=window_params(options, tokens, len(prompt), None),
            priority=0,
            restartable=restartable,
        )


def _ms(audio: LoadedAudio) -> int:
    return max(1, round(audio.seconds * 1000))


def _joined(results: list[WindowResult]) -> str:
    return " ".join(r.text.strip() for r in results if r.text.strip())
