"""Checkable claims of any answer, in any words, each with the yes/no question that verifies it against the media.

The world's checkers (grounding.claims and the evidence modules) know a fixed vocabulary. A judge (grounding.judge)
can check anything a model can see or hear, so its claims come from the answer's own words, read by rule:

- **objects**: a noun phrase after a determiner or a count ("a giraffe", "two red circles", "the large blue
  star"), with the adjectives before its head as attributes and a place after it as its position ("by the window",
  "on the left", "in the top right corner", "next to the square"). A phrase after "no" or a negation in its clause
  ("there is no star", "there isn't a star") is a claim that the thing is absent (`negated`).
- **counts**: a number word or digits before a plural noun ("three circles"); the count rides on the object.
- **attributes**: "the background is light grey", "the circles are red", "the big square in the middle is green",
  "the speaker's favourite colour is purple": a subject (a noun phrase, maybe with a place), a copula and an
  adjective run. In quoted speech "my" is the speaker's.
- **spoken facts** (grounding.spoken_claims): names, weekdays and dates, times, and other numbers.

Why rules and not a parser: no English dependency parser with a model installs from PyPI (spaCy's models are
published on GitHub, not PyPI; NLTK's and stanza's data download at run time), and answers to a question about
media are short sentences, for which a determiner-led noun phrase and a copula cover what a judge can check. The
table of wordings it must read is tests/unit/grounding/test_checkable.py.
"""

from __future__ import annotations

import dataclasses
import re

from grounding.checkable_claim import CheckableClaim, Medium
from grounding.claims import NUMBER_WORDS
from grounding.spoken_claims import spoken_claims

__all__ = ["CheckableClaim", "Medium", "checkable_claims"]

_DETERMINERS = frozenset({"a", "an", "the", "some", "several", "many", "another", "one", "single"})
_NUMBERS = {w: i for i, w in enumerate(NUMBER_WORDS)}
_COPULAS = frozenset({"is", "are", "was", "were", "looks", "look", "appears", "appear", "seems", "seem"})
_NEGATORS = frozenset({"no", "not", "never", "without", "none", "nor", "neither", "nothing", "isn't", "aren't"})
_PREPOSITIONS: tuple[str, ...] = (
    *("next to", "in front of", "on top of", "to the left of", "to the right of", "close to", "near"),
    *("by", "beside", "behind", "above", "below", "under", "over", "on", "in", "at", "inside"),
)
# Words that end a noun phrase's run of modifiers: the head is the word before them.
_BREAKS = (
    frozenset(
        {"and", "or", "but", "with", "which", "that", "who", "while", "of", "to", "from", "for", "as", "than", "then"}
    )
    | _COPULAS
    | frozenset(p.split()[0] for p in _PREPOSITIONS)
)
# Verbs that follow a subject in a description ("a star sits in the corner"): a noun phrase's head comes before.
_VERBS = frozenset(
    [
        "sits",
        "sit",
        "stands",
        "stand",
        "lies",
        "lie",
        "shows",
        "show",
        "has",
        "have",
        "holds",
        "hold",
        "contains",
        "contain",
        "features",
        "feature",
        "depicts",
        "depict",
        "displays",
        "display",
        "includes",
        "include",
        "hangs",
        "hang",
        "rests",
        "rest",
        "floats",
        "float",
        "says",
        "say",
        "said",
        "mentions",
        "mentioned",
        "asks",
        "asked",
        "calls",
        "called",
        "can",
        "could",
        "will",
        "would",
        "should",
        "may",
        "might",
        "do",
        "does",
        "did",
        "sitting",
        "standing",
        "lying",
        "hanging",
        "floating",
        "resting",
        "holding",
        "wearing",
        "placed",
        "located",
        "positioned",
        "drawn",
        "shown",
    ]
)
# Where something is, not what: the head of "the left", "the top right corner".
_PLACES = frozenset(
    [
        "left",
        "right",
        "top",
        "bottom",
        "middle",
        "centre",
        "center",
        "corner",
        "side",
        "edge",
        "front",
        "back",
        "foreground",
    ]
)
# Nouns that are not things on show: "a question", "the answer", "the image" itself.
_NOT_OBJECTS = frozenset(
    [
        "answer",
        "question",
        "image",
        "picture",
        "photo",
        "photograph",
        "clip",
        "audio",
        "recording",
        "sound",
        "speaker",
        "voice",
        "way",
        "kind",
        "lot",
        "bit",
        "time",
        "moment",
        "thing",
        "things",
        "one",
        "ones",
        "rest",
        "total",
        "number",
    ]
)
_SCENES = frozenset({"image", "picture", "photo", "photograph", "frame"})  # "in the image" is no position
_AUDIO_SCENES = frozenset({"clip", "audio", "recording", "speaker", "voice"})
_FILLERS = frozenset({"there", "it", "this", "that", "i", "you", "we", "they", "he", "she", "also", "just"})
_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?|\d+(?:[.:]\d+)?")
_CLAUSE = re.compile(r"[.!?;\n]+|,\s*(?:and|but|while)?\s*|\s+(?:and|but)\s+(?=(?:there|the|a|an|it|i)\b)", re.I)


def _singular(word: str) -> str:
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ses", "xes", "ches", "shes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _number(word: str) -> int | None:
    lowered = word.lower()
    if lowered.isdigit():
        return int(lowered)
    return _NUMBERS.get(lowered)


def _position(words: list[str], start: int) -> tuple[str | None, int]:
    """A place phrase at `start` ("by the window", "on the left", "in the top right corner"), ending before the
    next break or clause end; "in the image" is no place. Returns it and the index after it."""
    lowered = [w.lower() for w in words]
    for prep in _PREPOSITIONS:
        parts = prep.split()
        if lowered[start : start + len(parts)] != parts:
            continue
        end = start + len(parts)
        while end < len(words) and not (_ends_phrase(lowered[end]) and lowered[end] != "of"):
            end += 1
            if end - start > len(parts) + 4:
                break
        phrase_words = lowered[start:end]
        if len(phrase_words) == len(parts) or (set(phrase_words[len(parts) :]) & (_SCENES | _AUDIO_SCENES)):
            return None, end
        return " ".join(phrase_words), end
    return None, start


def _object_at(words: list[str], start: int, nested: bool = False) -> tuple[CheckableClaim | None, int, int]:
    """The noun phrase after the determiner or count at `start`, with its place; the index after its head and the
    index after its place. A phrase `nested` in another's place ("a woman in a dress stands...") takes no place
    after a verb: the verb is the outer phrase's."""
    lowered = [w.lower() for w in words]
    count = _number(lowered[start])
    end = start + 1
    while end < len(words) and not _ends_phrase(lowered[end]):
        if lowered[end] in _DETERMINERS:
            break
        end += 1
        if end - start > 5:
            break
    if end == start + 1:
        return None, end, end
    # The place may follow a verb or copula: "a star sits in the corner", "the star is on the left".
    verb = end < len(words) and (lowered[end] in _VERBS or lowered[end] in _COPULAS)
    if verb and nested:
        return _claim(words, start, end, end, None, count), end, end
    at = end + 1 if verb else end
    position, after = _position(words, at) if at < len(words) else (None, end)
    # The scan goes on from the head, so a thing named in the place ("next to a lamp") is a claim too.
    return _claim(words, start, end, max(after, end), position, count), end, max(after, end)


def _claim(
    words: list[str], start: int, end: int, stop: int, position: str | None, count: int | None
) -> CheckableClaim | None:
    lowered = [w.lower() for w in words]
    head, attributes = lowered[end - 1], tuple(lowered[start + 1 : end - 1])
    if head in _NOT_OBJECTS or head in _FILLERS or head in _PLACES or len(head) < 3 or not head.isalpha():
        return None
    counted = count if count is not None and lowered[start] != "single" else None
    return CheckableClaim("object", " ".join(words[start:stop]), _singular(head), attributes, position, counted)


def _ends_phrase(word: str) -> bool:
    return word in _BREAKS or word in _VERBS or _is_number_like(word)


def _is_number_like(word: str) -> bool:
    return word.isdigit() or word in _NUMBERS


_QUOTED = re.compile(r'"[^"]*"|“[^”]*”')
_MY = re.compile(r"\b[Mm]y\b")
_SUBJECT_STARTS = frozenset({"the", "its", "their", "his", "her", "my", "our", "your"})


def _tail(words: list[str], copula: int) -> tuple[str, ...]:
    """The adjectives after the copula at `copula`, as written, so a name keeps its capital."""
    tail = []
    for written in words[copula + 1 :]:
        word = written.lower()
        if word in _BREAKS or word in _DETERMINERS or word in _NEGATORS or _is_number_like(word):
            break
        tail.append(written)
    return tuple(tail)


def _attribute(words: list[str], start: int, end: int, copula: int, position: str | None) -> CheckableClaim | None:
    """The subject words[start + 1:end] after "the" (or a possessive) at `start`, maybe with a place, then the
    copula at `copula` and one to three adjectives: "the big square in the middle is green"."""
    subject = " ".join(w.lower() for w in words[start + 1 : end])
    tail = _tail(words, copula)
    if words[start].lower() not in _SUBJECT_STARTS or not subject or subject in _FILLERS or not 0 < len(tail) <= 3:
        return None
    return CheckableClaim("attribute", " ".join(words[start : copula + 1 + len(tail)]), subject, tail, position)


def _attribute_at(words: list[str], copula: int) -> CheckableClaim | None:
    """'its colour is purple': a subject of up to four words after the nearest "the" or possessive before the copula
    at `copula` (a subject after a determiner is read with its noun phrase, in `_clause_claims`)."""
    lowered = [w.lower() for w in words]
    start = next((s for s in range(copula - 2, max(-1, copula - 6), -1) if lowered[s] in _SUBJECT_STARTS), None)
    if start is None or any(w in _BREAKS or w in _DETERMINERS for w in lowered[start + 1 : copula]):
        return None
    return _attribute(words, start, copula, copula, None)


def _clause_claims(clause: str) -> list[CheckableClaim]:
    words = _WORD.findall(clause)
    lowered = [w.lower() for w in words]
    out: list[CheckableClaim] = []
    i, place_ends = 0, 0
    while i < len(words):
        negated = any(w in _NEGATORS or w.endswith("n't") for w in lowered[:i])
        word = lowered[i]
        if i > 0 and word in _COPULAS and not negated and (claim := _attribute_at(words, i)) is not None:
            out.append(claim)
            i += 1 + len(claim.attributes)
            continue
        if word in _DETERMINERS or word == "no" or (_is_number_like(word) and not _looks_like_time(lowered, i)):
            claim, after, place_end = _object_at(words, i, nested=i < place_ends)
            absent = negated or word == "no"  # "there is no green square", "there isn't a star"
            # "the speaker's favourite colour is purple", "the square in the middle is green": the noun phrase is
            # the subject of an attribute claim, which says more than the object alone
            copula = next((c for c in (after, place_end) if c < len(words) and lowered[c] in _COPULAS), None)
            if copula is not None and not absent:
                position = claim.position if claim is not None and copula == place_end else None
                if (attribute := _attribute(words, i, after, copula, position)) is not None:
                    out.append(attribute)
                    i = copula + 1 + len(attribute.attributes)
                    continue
            if claim is not None:
                out.append(dataclasses.replace(claim, negated=True, count=None) if absent else claim)
            place_ends = max(place_ends, place_end)
            i = max(after, i + 1)
            continue
        i += 1
    return out


def _looks_like_time(lowered: list[str], i: int) -> bool:
    return ":" in lowered[i] or lowered[i + 1 : i + 2] in (["am"], ["pm"], ["o'clock"])


def checkable_claims(answer: str) -> list[CheckableClaim]:
    """Every checkable claim of `answer`, in order of appearance within its kind, without duplicates."""
    found: list[CheckableClaim] = []
    # In quoted speech, "my" is the speaker's: 'The speaker says: "My favourite colour is black."' is a claim about
    # the speaker's favourite colour, heard in the clip.
    answer = _QUOTED.sub(lambda m: _MY.sub("the speaker's", m.group(0)), answer)
    for clause in _CLAUSE.split(answer):
        if clause and clause.strip():
            found += _clause_claims(clause)
    spoken = spoken_claims(answer)
    counted = {str(c.count) for c in found if c.count is not None}
    found += [c for c in spoken if not (c.kind == "number" and c.subject in counted)]
    unique: dict[tuple[str, str, tuple[str, ...], str | None, int | None, bool], CheckableClaim] = {}
    for claim in found:
        unique.setdefault(claim.key(), claim)
    return list(unique.values())
