"""Checkable claims of any answer, in any words, each with the yes/no question that verifies it against the media.

The world's checkers (grounding.claims and the evidence modules) know a fixed vocabulary. A judge (grounding.judge)
can check anything a model can see or hear, so its claims come from the answer's own words, read by rule:

- **objects**: a noun phrase after a determiner or a count ("a giraffe", "two red circles", "the large blue
  star"), with the adjectives before its head as attributes and a place after it as its position ("by the window",
  "on the left", "in the top right corner", "next to the square"). A phrase after a negation in its clause ("there
  is no star") asserts nothing and is dropped.
- **counts**: a number word or digits before a plural noun ("three circles"); the count rides on the object.
- **attributes**: "the background is light grey", "the circles are red": a subject, a copula and an adjective run.
- **spoken facts**: names (a capitalised word after "name is", "called", "named", "this is", "call", or a known
  given name), weekdays and dates ("Thursday", "March 3", "the 5th"), times ("3 pm", "10:30", "noon"), and other
  numbers ("42", "seven apples" is an object count instead).

Why rules and not a parser: no English dependency parser with a model installs from PyPI (spaCy's models are
published on GitHub, not PyPI; NLTK's and stanza's data download at run time), and answers to a question about
media are short sentences, for which a determiner-led noun phrase and a copula cover what a judge can check. The
table of wordings it must read is tests/unit/grounding/test_checkable.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from grounding.claims import GIVEN_NAMES, NUMBER_WORDS, WEEKDAYS, article

Medium = Literal["image", "audio"]
Kind = Literal["object", "attribute", "name", "date", "time", "number"]

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
_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_TIME = re.compile(r"\b(\d{1,2}(?::\d{2})?\s?(?:am|pm|a\.m\.|p\.m\.)|\d{1,2}:\d{2}|noon|midnight|\w+ o'clock)\b", re.I)
_DATE = re.compile(
    rf"\b(?:(?:{'|'.join(_MONTHS)})\s+\d{{1,2}}(?:st|nd|rd|th)?|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?"
    rf"(?:{'|'.join(_MONTHS)})|(?:the\s+)?\d{{1,2}}(?:st|nd|rd|th))\b",
    re.I,
)
_NAME_CUE = re.compile(r"\b(?:name is|named|called|call|this is|ask for|from|with|to)\s+([A-Z][a-z]+)")
_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?|\d+(?:[.:]\d+)?")
_CLAUSE = re.compile(r"[.!?;\n]+|,\s*(?:and|but|while)?\s*|\s+(?:and|but)\s+(?=(?:there|the|a|an|it|i)\b)", re.I)


@dataclass(frozen=True)
class CheckableClaim:
    """One fact an answer states that the media can confirm or deny."""

    kind: Kind
    text: str  # the answer's own words for it
    subject: str  # the head noun, or the spoken value (a name, a date)
    attributes: tuple[str, ...] = ()
    position: str | None = None  # a place phrase, e.g. "by the window"
    count: int | None = None

    def key(self) -> tuple[str, str, tuple[str, ...], str | None, int | None]:
        return (self.kind, self.subject, self.attributes, self.position, self.count)

    def question(self, medium: Medium) -> str:
        """The yes/no verification question about this claim (POPE-style)."""
        if self.kind == "object":
            where = f" {self.position}" if self.position else ""
            if self.count is not None and self.count != 1:
                many = " ".join((*self.attributes, _plural(self.subject)))
                number = NUMBER_WORDS[self.count] if self.count < len(NUMBER_WORDS) else str(self.count)
                return f"Are there {number} {many}{where} in the {_noun(medium)}?"
            described = " ".join((*self.attributes, self.subject))
            return f"Is there {article(described)} {described}{where} in the {_noun(medium)}?"
        if self.kind == "attribute":
            verb = "are" if self.subject.endswith("s") and not self.subject.endswith("ss") else "is"
            return f"In the {_noun(medium)}, {verb} the {self.subject} {' '.join(self.attributes)}?"
        if self.kind == "name":
            return f"Does the speaker say the name {self.subject}?"
        if self.kind in ("date", "time"):
            return f"Does the speaker mention {self.subject}?"
        return f"Does the speaker say the number {self.subject}?"

    def media(self) -> tuple[Medium, ...]:
        """The media that can speak to it: things and their looks are seen, names, dates, times and numbers heard;
        a thing may also be heard of ("a dog barks", "the speaker mentions an apple")."""
        if self.kind in ("object", "attribute"):
            return ("image", "audio") if self.kind == "object" else ("image",)
        return ("audio",)


def _noun(medium: Medium) -> str:
    return "image" if medium == "image" else "audio clip"


def _plural(word: str) -> str:
    if word.endswith("y") and word[-2:-1] not in ("a", "e", "o", "u"):
        return word[:-1] + "ies"
    return word + ("es" if word.endswith(("s", "x", "ch", "sh")) else "s")


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
    counted = count if count is not None and lowered[start] not in ("one", "single") else None
    return CheckableClaim("object", " ".join(words[start:stop]), _singular(head), attributes, position, counted)


def _ends_phrase(word: str) -> bool:
    return word in _BREAKS or word in _VERBS or _is_number_like(word)


def _is_number_like(word: str) -> bool:
    return word.isdigit() or word in _NUMBERS


def _attribute_at(words: list[str], copula: int) -> CheckableClaim | None:
    """'the background is light grey': the subject before the copula at `copula`, the adjectives after it."""
    lowered = [w.lower() for w in words]
    if copula < 2 or lowered[copula - 2] not in ("the", "its", "their"):
        return None
    subject = lowered[copula - 1]
    tail = []
    for word in lowered[copula + 1 :]:
        if word in _BREAKS or word in _DETERMINERS or word in _NEGATORS or _is_number_like(word):
            break
        tail.append(word)
    if not tail or len(tail) > 3 or subject in _FILLERS:
        return None
    return CheckableClaim("attribute", " ".join(words[copula - 2 : copula + 1 + len(tail)]), subject, tuple(tail))


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
        if word in _DETERMINERS or (_is_number_like(word) and not _looks_like_time(lowered, i)):
            claim, after, place_end = _object_at(words, i, nested=i < place_ends)
            if claim is not None and not negated:
                out.append(claim)
            place_ends = max(place_ends, place_end)
            i = max(after, i + 1)
            continue
        i += 1
    return out


def _looks_like_time(lowered: list[str], i: int) -> bool:
    return ":" in lowered[i] or lowered[i + 1 : i + 2] in (["am"], ["pm"], ["o'clock"])


def _spoken(answer: str) -> list[CheckableClaim]:
    out: list[CheckableClaim] = []
    for match in _TIME.finditer(answer):
        out.append(CheckableClaim("time", match.group(0), match.group(0).lower()))
    for match in _DATE.finditer(answer):
        value = match.group(0)
        if value.lower().startswith("the ") or any(m.lower() in value.lower() for m in _MONTHS):
            out.append(CheckableClaim("date", value, value.removeprefix("the ").removeprefix("The ")))
    for day in WEEKDAYS:
        if re.search(rf"\b{day}s?\b", answer, re.I):
            out.append(CheckableClaim("date", day, day))
    names = {m.group(1) for m in _NAME_CUE.finditer(answer) if m.group(1) not in (*WEEKDAYS, *_MONTHS)}
    names |= {n for n in GIVEN_NAMES if re.search(rf"\b{n}\b", answer)}
    out += [CheckableClaim("name", n, n) for n in sorted(names)]
    for match in re.finditer(r"(?<![\d:])\b\d+(?:\.\d+)?\b(?![:\d])(?!\s?(?:am|pm|st|nd|rd|th)\b)", answer, re.I):
        out.append(CheckableClaim("number", match.group(0), match.group(0)))
    return out


def checkable_claims(answer: str) -> list[CheckableClaim]:
    """Every checkable claim of `answer`, in order of appearance within its kind, without duplicates."""
    found: list[CheckableClaim] = []
    for clause in _CLAUSE.split(answer):
        if clause and clause.strip():
            found += _clause_claims(clause)
    spoken = _spoken(answer)
    counted = {str(c.count) for c in found if c.count is not None}
    found += [c for c in spoken if not (c.kind == "number" and c.subject in counted)]
    unique: dict[tuple[str, str, tuple[str, ...], str | None, int | None], CheckableClaim] = {}
    for claim in found:
        unique.setdefault(claim.key(), claim)
    return list(unique.values())
