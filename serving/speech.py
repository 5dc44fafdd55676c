"""Speech to text on a transcription pool: the decoder prompt Tessera builds, audio cut into Whisper's 30 s windows,
and the windows' tokens read back as text and timed segments.

vLLM's own Whisper prompt names a language and a task (`<|en|><|transcribe|>`), tokens an English-only checkpoint
(tiny.en to medium.en) was never trained with, so Tessera builds the decoder prompt itself:
- English-only: `<|startoftranscript|>`, then `<|notimestamps|>` unless segments are asked for;
- multilingual: `<|startoftranscript|><|xx|><|transcribe|>` (or `<|translate|>`), then the same;
- a client `prompt` goes before them after `<|startofprev|>`, as Whisper's earlier text (its last 223 tokens).

A verbose_json segment's `no_speech_prob` is Whisper's probability of its no-speech token (`<|nocaptions|>`,
`<|nospeech|>` in later checkpoints) right after `<|startoftranscript|>`, as Whisper measures it: one more
one-token decoding of the window with the prompt up to that token, that token's logit raised so it is the one
chosen, and its logprob read as vLLM reports it (the model's own, before any bias).

Timed segments come from Whisper's own timestamp tokens (`<|0.00|>` to `<|30.00|>`, every 20 ms): the window is
decoded without `<|notimestamps|>`, which is kept from being chosen, and the tokens between two timestamps are one
segment, offset by the window's start.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from serving.engines.base import GenerationParams, SpeechRequest
from serving.errors import InvalidRequest
from serving.pools import TaskPool

SAMPLE_RATE = 16_000
WINDOW_S = 30
TIMESTAMP_STEP_S = 0.02
MAX_PROMPT_TOKENS = 223  # Whisper's earlier text takes at most half of its 448-token context
MAX_WINDOW_TOKENS = 224  # 30 s of fast speech is about 120 tokens


@dataclass(frozen=True)
class SpeechOptions:
    task: str = "transcribe"  # transcribe | translate
    language: str | None = None  # ISO 639-1; None: English on an English-only pool, else the pool detects nothing
    prompt: str = ""
    temperature: float = 0.0
    timestamps: bool = False  # decode timed segments (verbose_json, srt, vtt)


@dataclass
class Segment:
    id: int
    start: float
    end: float
    text: str
    tokens: list[int] = field(default_factory=list)
    avg_logprob: float | None = None
    no_speech_prob: float | None = None


@dataclass
class WindowResult:
    """One window's decoding: its text deltas as they came, its tokens and their logprobs."""

    offset_s: float
    duration_s: float
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    no_speech_prob: float | None = None  # measured only for timed segments (`no_speech_params`)


class SpeechTokens:
    """The special tokens of a Whisper tokenizer that the decoder prompt and the segments need."""

    def __init__(self, tokenizer: Any) -> None:
        def find(token: str) -> int | None:
            found = tokenizer.convert_tokens_to_ids(token)
            # An unknown token maps to the unknown token's id (Whisper's is <|endoftext|>): only a round trip tells.
            if found is None or tokenizer.convert_ids_to_tokens(int(found)) != token:
                return None
            return int(found)

        start, end, none = find("<|startoftranscript|>"), find("<|endoftext|>"), find("<|notimestamps|>")
        if start is None or end is None or none is None:
            raise ValueError("the tokenizer is not a Whisper tokenizer (no <|startoftranscript|> or <|notimestamps|>)")
        self.start, self.end, self.no_timestamps = start, end, none
        self.timestamp_begin = none + 1
        self.previous = find("<|startofprev|>")
        self.no_speech = find("<|nospeech|>") or find("<|nocaptions|>")
        self.find = find


def windows(samples: np.ndarray) -> list[tuple[float, np.ndarray]]:
    """The audio cut into Whisper's 30 s windows, each with its start in seconds."""
    step = WINDOW_S * SAMPLE_RATE
    return [(i / SAMPLE_RATE, samples[i : i + step]) for i in range(0, max(len(samples), 1), step)]


def decoder_prompt(pool: TaskPool, tokens: SpeechTokens, options: SpeechOptions) -> tuple[int, ...]:
    """The decoder's prompt for one window (see the module's docstring); a 400 for what the pool cannot do."""
    prompt: list[int] = []
    if options.prompt:
        if tokens.previous is None:
            raise InvalidRequest(f"model '{pool.name}' takes no prompt", param="prompt", code="unsupported_parameter")
        with pool.tokenizer_lock:
            earlier = pool.tokenizer.encode(" " + options.prompt.strip(), add_special_tokens=False)
        prompt = [tokens.previous, *earlier[-MAX_PROMPT_TOKENS:]]
    prompt.append(tokens.start)
    if not pool.english_only:
        language = tokens.find(f"<|{options.language or 'en'}|>")
        task = tokens.find(f"<|{options.task}|>")
        if language is None:
            raise InvalidRequest(
                f"model '{pool.name}' does not know the language {options.language!r}", param="language"
            )
        if task is None:
            raise InvalidRequest(f"model '{pool.name}' cannot {options.task}", param="model")
        prompt += [language, task]
    if not options.timestamps:
        prompt.append(tokens.no_timestamps)
    return tuple(prompt)


def check_options(pool: TaskPool, options: SpeechOptions) -> None:
    """What an English-only pool refuses: translation (it knows only English, so there is nothing to translate
    into English from) and any language but English."""
    if not pool.english_only:
        return
    if options.task == "translate":
        raise InvalidRequest(
            f"model '{pool.name}' is English-only and cannot translate; use /v1/audio/transcriptions",
            param="model",
            code="unsupported_model",
        )
    if options.language not in (None, "", "en"):
        raise InvalidRequest(
            f"model '{pool.name}' is English-only; language must be 'en' or unset, not {options.language!r}",
            param="language",
            code="unsupported_language",
        )


def window_params(options: SpeechOptions, tokens: SpeechTokens, prompt_len: int, seed: int | None) -> GenerationParams:
    return GenerationParams(
        max_tokens=min(MAX_WINDOW_TOKENS, 448 - prompt_len),
        temperature=options.temperature,
        seed=seed,
        logprobs=0,  # the chosen token's logprob, for a segment's avg_logprob
        logit_bias={tokens.no_timestamps: -100.0} if options.timestamps else None,
    )


def no_speech_prompt(prompt: tuple[int, ...], tokens: SpeechTokens) -> tuple[int, ...]:
    """The decoder prompt up to and including `<|startoftranscript|>`: where Whisper reads its no-speech
    probability."""
    return prompt[: prompt.index(tokens.start) + 1]


def no_speech_params(tokens: SpeechTokens) -> GenerationParams | None:
    """One token, the no-speech token made the choice, with its own logprob; None for a tokenizer without one."""
    if tokens.no_speech is None:
        return None
    return GenerationParams(max_tokens=1, temperature=0.0, logprobs=0, logit_bias={tokens.no_speech: 100.0})


async def no_speech_probability(pool: TaskPool, request: SpeechRequest, tokens: SpeechTokens) -> float | None:
    """The window's probability of no speech (`no_speech_prompt`, `no_speech_params`); None if the engine chose
    another token or gave no logprob."""
    async for delta in pool.engine.transcribe(request):
        if delta.token_ids and delta.token_ids[0] == tokens.no_speech and delta.logprobs:
            return round(math.exp(delta.logprobs[0].logprob), 6)
        return None
    return None


async def decode_window(pool: TaskPool, request: SpeechRequest, result: WindowResult) -> AsyncIterator[str]:
    """Runs one window on the pool's engine, yielding its text deltas and filling `result`."""
    async for delta in pool.engine.transcribe(request):
        result.token_ids.extend(delta.token_ids)
        if delta.logprobs:
            result.logprobs.extend(lp.logprob for lp in delta.logprobs)
        if delta.text:
            result.text += delta.text
            yield delta.text


def segments(pool: TaskPool, tokens: SpeechTokens, results: list[WindowResult]) -> list[Segment]:
    """Timed segments from each window's timestamp tokens; a window whose decoding carries none (or an unfinished
    last segment) gives one segment to the window's end."""
    out: list[Segment] = []
    for window in results:
        start: float | None = None
        body: list[int] = []
        lps: list[float] = []
        ids = window.token_ids
        probs = window.logprobs if len(window.logprobs) == len(ids) else [math.nan] * len(ids)
        for token, lp in zip(ids, probs, strict=True):
            if token >= tokens.timestamp_begin:
                at = window.offset_s + (token - tokens.timestamp_begin) * TIMESTAMP_STEP_S
                if start is None:
                    start = at
                elif body:
                    out.append(_segment(pool, len(out), start, at, body, lps, window.no_speech_prob))
                    start, body, lps = None, [], []
                else:
                    start = at
            elif token != tokens.end:
                body.append(token)
                lps.append(lp)
        if body:
            begin = window.offset_s if start is None else start
            end = window.offset_s + window.duration_s
            out.append(_segment(pool, len(out), begin, end, body, lps, window.no_speech_prob))
    return out


def _segment(
    pool: TaskPool,
    index: int,
    start: float,
    end: float,
    body: list[int],
    lps: list[float],
    no_speech: float | None,
) -> Segment:
    with pool.tokenizer_lock:
        text = pool.tokenizer.decode(body, skip_special_tokens=True)
    finite = [lp for lp in lps if math.isfinite(lp)]
    avg = sum(finite) / len(finite) if finite else None
    return Segment(index, round(start, 2), round(max(end, start), 2), text, list(body), avg, no_speech)
