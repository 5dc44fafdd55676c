"""Splitting answers into claims and transcripts into chunks, the text units the grounding scorer compares."""

from __future__ import annotations

import re

# A sentence ends at . ! or ? followed by whitespace; newlines always end one.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_LIST_MARKER = re.compile(r"^\s*(?:[-*•>]+|#+|\d+[.)])\s+")
_WORD = re.compile(r"[^\W_]+")
# Fewer words than this is filler ("Sure!", "Yes.") that states nothing checkable.
MIN_CLAIM_WORDS = 3
# Transcript sentences longer than this (Whisper leaves some speech unpunctuated) are cut into word windows,
# so one long run-on does not blur every claim's match.
MAX_CHUNK_WORDS = 40


def sentences(text: str) -> list[str]:
    """Sentences of `text`, with markdown list and heading markers stripped and blank pieces dropped."""
    out: list[str] = []
    for line in text.splitlines():
        body = _LIST_MARKER.sub("", line).replace("**", "").replace("__", "").strip()
        out.extend(piece.strip() for piece in _SENTENCE_END.split(body) if piece.strip())
    return out


def split_claims(answer: str) -> list[str]:
    """The checkable statements of an answer: its sentences, less lead-ins ending in ':' and short filler."""
    return [s for s in sentences(answer) if not s.endswith(":") and len(_WORD.findall(s)) >= MIN_CLAIM_WORDS]


def transcript_chunks(transcript: str, *, max_window: int = 3) -> list[str]:
    """Overlapping chunks of a transcript: every run of 1..`max_window` consecutive sentences.

    Windows let a claim that summarises two or three spoken sentences match their union; single sentences keep
    a claim about one detail from being diluted by its neighbours.
    """
    units: list[str] = []
    for sentence in sentences(transcript):
        words = sentence.split()
        if len(words) <= MAX_CHUNK_WORDS:
            units.append(sentence)
            continue
        step = MAX_CHUNK_WORDS // 2
        units.extend(" ".join(words[i : i + MAX_CHUNK_WORDS]) for i in range(0, len(words) - step, step))
    chunks: list[str] = []
    for size in range(1, max_window + 1):
        chunks.extend(" ".join(units[i : i + size]) for i in range(len(units) - size + 1))
    return chunks
