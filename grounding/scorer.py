"""The grounding score: the fraction of an answer's claims that the request's media support.

How a score is made (`GroundingScorer.score_media`):
1. Evidence. Images: what the answering pool's vision tower detected (its label head; serving.encoders.detection). Audio
   (float32 mono 16 kHz): a sound label read off the signal, and for speech Whisper tiny.en's five best transcripts
   (CTranslate2, int8, 5 beams, 30 s windows; windows Whisper judges to be silence are dropped) plus, where a
   served checkpoint's audio tower was trained for the demo world, the words that tower hears (grounding.hearing).
   A request with neither gets no score (None), not a zero.
2. Facts (objects, colours, positions, counts, yes/no; names, days, numbers, things, sounds) are checked one by
   one against the evidence (grounding.image_evidence, grounding.audio_evidence): a spoken fact any transcript
   says is supported, and one the tower's reading says unless Whisper's best transcript says another value in its
   slot; a claim about an image resting on what the label head is unsure of (a shape's colour split between
   colours, a shape glimpsed but not detected) is not.
3. Other sentences are checked for topical support: the answer is split into claims (its sentences and list
   items, less lead-ins that end in ':' and fragments of fewer than three words, such as "Sure!"), the best
   transcript into chunks (every run of one to three consecutive sentences, run-on sentences cut into 40-word
   windows), both embedded with all-MiniLM-L6-v2 (mean pooled, L2-normalised); a claim is supported when its best
   cosine similarity to any chunk is at least `SUPPORT_THRESHOLD`.
4. The score is supported claims / claims. With audio, an answer with no claims scores 0.0, and so does any answer
   about a clip that held no speech.

`SUPPORT_THRESHOLD` (0.55) sits between paraphrases of a transcript and claims that only reuse its topic words
(docs/grounding.md has the calibration). The score measures topical support, not entailment: a claim that
contradicts the transcript in the same words can still pass.

Models load lazily, once (on first use or `load()`). Calls block, so the server runs them in a worker thread,
never on the event loop; concurrent calls are safe. Whisper uses one core (CTranslate2's intra_threads=1) and
MiniLM one (a dedicated thread whose OpenMP thread count alone is 1: torch.set_num_threads would change the whole
process, engine included); the tower's short reading runs on torch's threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grounding.audio_evidence import SOUND_TEXT, Heard, audio_claim_verdicts, heard_of, sound_label
from grounding.hearing import AudioWordReader
from grounding.image_evidence import image_claim_verdicts
from grounding.models import MiniLMEmbedder, WhisperTranscriber, default_minilm_dir, default_whisper_dir
from grounding.questions import IMAGE_KINDS, question_kind
from grounding.sentences import split_claims, transcript_chunks
from serving.encoders.detection import ImageFindings

SUPPORT_THRESHOLD = 0.55


@dataclass(frozen=True)
class GroundingResult:
    score: float  # supported claims over claims, 0..1
    claims: int
    unsupported: tuple[str, ...]
    # Each checked claim: its text, whether it is supported, the evidence that spoke (label_head or judge) and,
    # for the judge, its probability of yes.
    checked: tuple[dict[str, Any], ...] = ()
    # What the claims were about (lower case): the things seen (a shape's kind; "shape" for a count of shapes) and
    # the values heard (a name, a weekday, a number, a colour). Under `both` evidence a judged claim about one of
    # them is the label head's to decide (see `combine`).
    about: frozenset[str] = frozenset()


class GroundingScorer:
    """Scores answers against request audio. Models load on first use; construction only locates them."""

    def __init__(
        self,
        *,
        whisper_dir: Path | None = None,
        minilm_dir: Path | None = None,
        support_threshold: float = SUPPORT_THRESHOLD,
        transcript_hint: str = "",
        audio_reader: AudioWordReader | None = None,
    ) -> None:
        self._whisper = WhisperTranscriber(whisper_dir or default_whisper_dir(), hint=transcript_hint)
        self._minilm = MiniLMEmbedder(minilm_dir or default_minilm_dir())
        self._reader = audio_reader
        self.support_threshold = support_threshold

    def load(self) -> None:
        """Loads the models now rather than on the first request (idempotent)."""
        self._whisper.load()
        self._minilm.load()
        if self._reader is not None:
            self._reader.load()

    def close(self) -> None:
        """Stops the embedding thread; the scorer cannot be used afterwards."""
        self._minilm.close()

    def transcribe(self, pcm16k: np.ndarray) -> str:
        """The English transcript of float32 mono 16 kHz samples; "" for silence or no samples."""
        return self._whisper.transcribe(pcm16k)

    def hypotheses(self, pcm16k: np.ndarray) -> Heard:
        """Whisper's best transcripts of the samples, best first, and what the audio reader's tower heard in them,
        where there is a reader: what `score_media` checks spoken facts against."""
        heard = self._whisper.hypotheses(pcm16k)
        return Heard(heard, self._reader.read(pcm16k) if self._reader is not None else "")

    def claim_support(self, answer: str, transcript: str) -> list[tuple[str, float]]:
        """Each claim of `answer` with its best cosine similarity to any chunk of `transcript` (0.0 if none)."""
        claims = split_claims(answer)
        if not claims:
            return []
        chunks = transcript_chunks(transcript)
        if not chunks:
            return [(claim, 0.0) for claim in claims]
        vectors = self._minilm.embed(claims + chunks)
        similarity = vectors[: len(claims)] @ vectors[len(claims) :].T
        return [(claim, float(best)) for claim, best in zip(claims, similarity.max(axis=1), strict=True)]

    def score(self, answer: str, transcript: str) -> float:
        """The fraction of the answer's claims supported by the transcript, 0..1."""
        support = self.claim_support(answer, transcript)
        if not support:
            return 0.0
        return sum(best >= self.support_threshold for _, best in support) / len(support)

    def score_request(self, answer: str, audio_pcm16k: np.ndarray | None) -> float | None:
        """The grounding score of a finished answer, or None when the request carried no audio to ground it."""
        if audio_pcm16k is None or np.asarray(audio_pcm16k).size == 0:
            return None
        return self.score(answer, self.transcribe(audio_pcm16k))

    def score_media(
        self,
        answer: str,
        audio_pcm16k: np.ndarray | None,
        images: tuple[ImageFindings, ...] = (),
        question: str = "",
        transcript: str | Sequence[str] | Heard | None = None,
    ) -> GroundingResult | None:
        """The score of an answer against all the evidence its request carried. None when there is none (no
        audio, and no tower that detects).

        Claims are checked fact by fact where the world's facts can be read (see grounding.image_evidence and
        grounding.audio_evidence): objects, colours, positions, counts and yes/no about images against the
        detections; names, days, numbers, colours, counted things and the kind of sound against the clip's
        transcript and sound label. With both media, a fact either medium supports is supported. A sentence with
        no such fact is checked for topical support against the transcript (or the sound's description), as
        `score` does. `transcript` may be given when it was made already (it is otherwise made here): one
        transcript, Whisper's best few, best first, or those with the tower's reading (`hypotheses`); a spoken
        fact any transcript says is supported, and one the reading says unless the best transcript says otherwise,
        and sentences are checked against the best."""
        has_audio = audio_pcm16k is not None and np.asarray(audio_pcm16k).size > 0
        if not has_audio and not images:
            return None
        verdicts: dict[tuple[str, str | None, str], tuple[str, bool]] = {}
        about: set[str] = set()

        def add(found: list[tuple[str, bool, tuple[str, str | None, str]]], seen_in_image: bool) -> None:
            for text, ok, key in found:
                seen = verdicts.get(key)
                verdicts[key] = (text, ok or (seen is not None and seen[1]))
                about.update(_about(key, seen_in_image))

        if images:
            add(image_claim_verdicts(answer, images, question), seen_in_image=True)
        if has_audio:
            assert audio_pcm16k is not None
            label = sound_label(audio_pcm16k)
            if transcript is None:
                transcript = self.hypotheses(audio_pcm16k) if label == "speech" else ""
            alternatives = heard_of(transcript)
            add(audio_claim_verdicts(answer, alternatives, label), seen_in_image=False)
            heard = alternatives.best if label == "speech" and alternatives.best else SOUND_TEXT[label]
            for sentence, best in self.claim_support(answer, heard):
                if image_claim_verdicts(sentence, images, question) or audio_claim_verdicts(sentence, heard, label):
                    continue  # its facts were checked one by one above
                verdicts[("sentence", None, sentence)] = (sentence, best >= self.support_threshold)
        if not verdicts:
            # As `score`, audio with nothing checkable scores 0. So does an image answer asserting nothing to a
            # question about what the image shows (it did not answer from the image); to anything else, 1.
            asked_about_image = question_kind(question) in IMAGE_KINDS
            return GroundingResult(0.0 if has_audio or asked_about_image else 1.0, 0, ())
        unsupported = tuple(text for text, ok in verdicts.values() if not ok)
        checked = tuple({"claim": text, "evidence": "label_head", "supported": ok} for text, ok in verdicts.values())
        score = (len(verdicts) - len(unsupported)) / len(verdicts)
        return GroundingResult(score, len(verdicts), unsupported, checked, frozenset(about))


def _about(key: tuple[str, str | None, str], seen_in_image: bool) -> set[str]:
    """What a fact checked under `key` (kind, noun, value) is about: an image's shape (and "shape" for a count of
    shapes), a clip's thing or spoken value (a name, a day, a number, a colour, a kind of sound)."""
    kind, noun, value = key
    if kind == "sentence":
        return set()  # a sentence checked for topical support speaks to no fact in particular
    out = {noun.lower()} if noun else set()
    if seen_in_image:
        if kind == "number" and not noun:
            out.add("shape")
    elif value:
        out.add(value.lower())
    return out


def combine(label_head: GroundingResult | None, judged: Sequence[Any] | None) -> GroundingResult | None:
    """One result from the label head's (and transcript's) result and the judge's claims (grounding.judge), under
    `both` evidence: each claim is decided by the evidence that can speak to it. A claim about something the label
    head checked (a shape it detects, a name or day the transcript says; its `about`) is the label head's, which
    is calibrated to those facts; the judge decides the rest (things on no list, places, times, anything of a
    checkpoint with no label head), and its claims count beside the label head's. The judge alone scores an answer
    where the label head had no claim to check; claims the judge could not judge do not count. None when neither
    gives evidence."""
    covered = label_head.about if label_head is not None else frozenset()
    verdicts = [j for j in judged or () if j.supported is not None and not (set(j.about) & covered)]
    if not verdicts:
        return label_head
    checked = tuple(j.wire() for j in verdicts)
    unsupported = tuple(j.claim for j in verdicts if not j.supported)
    if label_head is not None and label_head.claims:
        total = label_head.claims + len(verdicts)
        supported = label_head.claims - len(label_head.unsupported) + len(verdicts) - len(unsupported)
        return GroundingResult(
            supported / total, total, label_head.unsupported + unsupported, label_head.checked + checked
        )
    return GroundingResult((len(verdicts) - len(unsupported)) / len(verdicts), len(verdicts), unsupported, checked)


def each_evidence(label_head: GroundingResult | None, judged: Sequence[Any] | None) -> tuple[tuple[str, float], ...]:
    """The score each evidence that spoke gives on its own (`label_head`, `judge`): under `both`, what either alone
    would have scored."""
    judge_only = combine(None, judged)
    return tuple((name, result.score) for name, result in (("label_head", label_head), ("judge", judge_only)) if result)
