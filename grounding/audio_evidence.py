"""Checking an answer's claims about a clip against what was heard: a transcript plus a sound label.

The sound label comes from the samples themselves, by signal measures rather than a model, because the four
kinds of clip differ plainly there: `silence` has almost no energy; a `beep` (a pure tone) puts most of its
spectrum's energy in one narrow band; `noise` (white noise) has a flat spectrum; `speech` is everything else.
Whisper's transcript (grounding.models) is the evidence for what a voice said.

Claims are the answer's facts as `demo.answers.extract_claims` reads them, checked against the same
extraction of the transcript: every name, weekday, number (counts and hours), colour not bound to a shape, and
thing of the spoken world (apples, books, cups, chairs, dogs, cats, a table) must be in the transcript, and every
sound word (a voice, a beep, silence, noise) must match the label. Things are keyed as image objects are, so with
both media a table the clip speaks of (or "the speaker", its voice) is not held against the image. So "There are
five cats on the table" against a clip saying "six cats" is unsupported on the number, where a sentence-similarity
check would pass it as on topic.

The transcript is each of Whisper's five best (one beam search): a fact any of them says was heard, since a small
recogniser's runners-up often hold the word its best guess missed. A second listener's reading (the answering
checkpoint's own audio tower, grounding.hearing) supports a fact too, unless Whisper's best transcript says another
value in the same slot (another name, day, number or colour): the tower that answered shares its reader's
mishearings, so where the two recognisers disagree the one that did not answer wins. docs/grounding.md gives the
measurements behind both rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from grounding.claims import SpokenKey, extract_claims, spoken_claims

SAMPLE_RATE = 16_000
SILENCE_RMS = 0.003
TONE_SHARE = 0.6  # energy within +-2 % of the strongest frequency, over all energy
NOISE_FLATNESS = 0.35  # geometric over arithmetic mean of the power spectrum
SLOTS = frozenset({"name", "day", "number", "colour"})  # facts where Whisper's best overrules the second listener
# A voice says things; silence, a beep and noise say nothing.
SOUND_TEXT = {
    "speech": "A voice speaking.",
    "beep": "A beep, a pure tone.",
    "silence": "Silence, nothing to hear.",
    "noise": "White noise, a steady hiss.",
}


def sound_label(samples: np.ndarray) -> str:
    """`speech`, `beep`, `silence` or `noise` for float32 mono 16 kHz samples."""
    x = np.asarray(samples, dtype=np.float64).reshape(-1)
    if x.size == 0 or float(np.sqrt(np.mean(x**2))) < SILENCE_RMS:
        return "silence"
    power = np.abs(np.fft.rfft(x * np.hanning(x.size))) ** 2
    power = power[1:]  # the DC bin says nothing about the sound
    total = float(power.sum()) or 1.0
    peak = int(power.argmax())
    band = max(2, int(peak * 0.02))
    if float(power[max(0, peak - band) : peak + band + 1].sum()) / total >= TONE_SHARE:
        return "beep"
    flatness = float(np.exp(np.mean(np.log(power + 1e-20))) / (np.mean(power) + 1e-20))
    return "noise" if flatness >= NOISE_FLATNESS else "speech"


Verdict = tuple[str, bool, SpokenKey]  # as grounding.image_evidence's


def claim_text(key: SpokenKey) -> str:
    kind, noun, value = key
    if kind == "object":
        return f"a {noun}"
    return {"name": "the name {}", "day": "on {}", "number": "the number {}", "colour": "the colour {}"}.get(
        kind, "{}"
    ).format(value)


@dataclass(frozen=True)
class Heard:
    """What a clip was heard to say: a recogniser's best transcripts (best first, at least one) and a second
    listener's reading ("" for none)."""

    transcripts: tuple[str, ...] = ("",)
    reading: str = ""

    @property
    def best(self) -> str:
        return self.transcripts[0]


def heard_of(heard: str | Sequence[str] | Heard) -> Heard:
    """One transcript, a recogniser's best few (best first), or a `Heard` as it is."""
    if isinstance(heard, Heard):
        return heard
    return Heard(transcripts(heard))


def transcripts(transcript: str | Sequence[str]) -> tuple[str, ...]:
    """One transcript, or a recogniser's best few (best first), as a tuple of at least one (empty: `("",)`)."""
    return (transcript,) if isinstance(transcript, str) else tuple(transcript) or ("",)


def _said(text: str) -> set[SpokenKey]:
    return set(spoken_claims(extract_claims(text)))


def _overruled(key: SpokenKey, best: set[SpokenKey]) -> bool:
    """Whether the best transcript says another value in `key`'s slot."""
    return key[0] in SLOTS and any(other[0] == key[0] and other != key for other in best)


def audio_claim_verdicts(answer: str, transcript: str | Sequence[str] | Heard, label: str) -> list[Verdict]:
    """Each checkable claim of `answer` about the clip, worded for people, whether the clip supports it, and its
    key (numbers and colours share keys with image claims of the same value). `transcript` may be several
    transcripts of the same speech (a recogniser's best guesses): a fact any of them says is supported; a second
    listener's reading (a `Heard`'s) supports a fact the best transcript does not contradict."""
    heard = heard_of(transcript)
    said: set[SpokenKey] = set()
    if label == "speech":
        each = [_said(text) for text in heard.transcripts]  # each[0]: the best transcript's
        said = set().union(*each)
        said |= {key for key in _said(heard.reading) if not _overruled(key, each[0])}
    answer_claims = extract_claims(answer)
    verdicts: list[Verdict] = [(claim_text(k), k in said, k) for k in spoken_claims(answer_claims)]
    verdicts += [(f"the sound is {s}", s == label, ("sound", None, s)) for s in sorted(answer_claims.sounds)]
    # "the speaker" is the voice of the clip (keyed as an image's objects are, so no image need show one)
    if "speaker" in answer_claims.objects:
        verdicts.append(("a speaker", label == "speech", ("object", "speaker", "")))
    return verdicts
