"""Speech windows, the decoder prompt Tessera builds for English-only and multilingual Whisper pools, and timed
segments read back from Whisper's timestamp tokens (with the demo checkpoint's real tokenizer)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from serving.errors import InvalidRequest
from serving.pools import TaskPool
from serving.speech import (
    SpeechOptions,
    SpeechTokens,
    WindowResult,
    check_options,
    decoder_prompt,
    no_speech_params,
    no_speech_prompt,
    segments,
    windows,
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from demo.whisper_checkpoint import _tokenizer
    from demo.whisper_tower import whisper_model_file

    return _tokenizer(whisper_model_file().parent / "tokenizer.json")


def _pool(tokenizer, english_only=True):
    return TaskPool("whisper", "transcription", SimpleNamespace(), tokenizer, english_only=english_only)


def test_audio_is_cut_into_30_second_windows():
    cut = windows(np.zeros(16_000 * 65, dtype=np.float32))
    assert [(start, len(chunk)) for start, chunk in cut] == [(0.0, 480_000), (30.0, 480_000), (60.0, 80_000)]
    assert len(windows(np.zeros(100, dtype=np.float32))) == 1


def test_an_english_only_pool_gets_no_language_or_task_token(tokenizer):
    tokens = SpeechTokens(tokenizer)
    pool = _pool(tokenizer)
    assert decoder_prompt(pool, tokens, SpeechOptions()) == (tokens.start, tokens.no_timestamps)
    assert decoder_prompt(pool, tokens, SpeechOptions(timestamps=True)) == (tokens.start,)
    prompted = decoder_prompt(pool, tokens, SpeechOptions(prompt="Ada and Grace"))
    assert prompted[0] == tokens.previous
    assert prompted[-2:] == (tokens.start, tokens.no_timestamps)
    assert tokenizer.decode(prompted[1:-2]) == " Ada and Grace"
    long = decoder_prompt(pool, tokens, SpeechOptions(prompt="word " * 400))
    assert len(long) == 1 + 223 + 2


def test_a_multilingual_pool_names_language_and_task(tokenizer):
    tokens = SpeechTokens(tokenizer)
    pool = _pool(tokenizer, english_only=False)
    prompt = decoder_prompt(pool, tokens, SpeechOptions(task="translate", language="de"))
    assert tokenizer.convert_ids_to_tokens(list(prompt)) == [
        "<|startoftranscript|>",
        "<|de|>",
        "<|translate|>",
        "<|notimestamps|>",
    ]
    with pytest.raises(InvalidRequest) as bad:
        decoder_prompt(pool, tokens, SpeechOptions(language="xx"))
    assert bad.value.param == "language"


def test_an_english_only_pool_refuses_translation_and_other_languages(tokenizer):
    pool = _pool(tokenizer)
    check_options(pool, SpeechOptions(language="en"))
    with pytest.raises(InvalidRequest) as translate:
        check_options(pool, SpeechOptions(task="translate"))
    assert translate.value.param == "model"
    with pytest.raises(InvalidRequest) as german:
        check_options(pool, SpeechOptions(language="de"))
    assert german.value.param == "language"
    check_options(_pool(tokenizer, english_only=False), SpeechOptions(task="translate", language="de"))


def test_timestamp_tokens_become_segments_offset_by_their_window(tokenizer):
    tokens = SpeechTokens(tokenizer)
    pool = _pool(tokenizer)
    hello = tokenizer.encode(" Hello.", add_special_tokens=False)
    bye = tokenizer.encode(" Bye.", add_special_tokens=False)
    at = lambda seconds: tokens.timestamp_begin + round(seconds / 0.02)  # noqa: E731
    first = WindowResult(0.0, 30.0, [at(0), *hello, at(1.5), at(1.5), *bye, at(2.0), tokens.end])
    first.logprobs = [0.0] + [-0.5] * len(hello) + [0.0, 0.0] + [-1.0] * len(bye) + [0.0, 0.0]
    first.no_speech_prob = 0.01
    second = WindowResult(30.0, 4.0, [*hello, tokens.end])  # no timestamps: one segment to the window's end
    found = segments(pool, tokens, [first, second])
    assert [(s.start, s.end, s.text) for s in found] == [
        (0.0, 1.5, " Hello."),
        (1.5, 2.0, " Bye."),
        (30.0, 34.0, " Hello."),
    ]
    assert found[0].avg_logprob == -0.5
    assert found[1].avg_logprob == -1.0
    assert found[2].avg_logprob is None
    assert [s.id for s in found] == [0, 1, 2]
    assert [s.no_speech_prob for s in found] == [0.01, 0.01, None]  # each segment carries its window's


def test_no_speech_is_read_right_after_the_start_of_transcript(tokenizer):
    tokens = SpeechTokens(tokenizer)
    assert tokenizer.convert_ids_to_tokens(tokens.no_speech) == "<|nocaptions|>"  # tiny.en's name for it
    prompt = decoder_prompt(_pool(tokenizer), tokens, SpeechOptions(prompt="Earlier words.", timestamps=True))
    start = no_speech_prompt(prompt, tokens)
    assert start[-1] == tokens.start
    assert start == prompt[: len(start)]
    params = no_speech_params(tokens)
    assert params is not None
    assert (params.max_tokens, params.logprobs, params.logit_bias) == (1, 0, {tokens.no_speech: 100.0})
