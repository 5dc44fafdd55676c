"""A checkable claim: one fact an answer states that the media can confirm or deny, and the yes/no question that
verifies it (grounding.checkable reads them from answers; grounding.judge asks the questions)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from grounding.claims import COLOUR_WORDS, NUMBER_WORDS, POSITION_WORDS, SIZE_WORDS, article

Medium = Literal["image", "audio"]
Kind = Literal["object", "attribute", "name", "date", "time", "number"]

_AUDIO_SUBJECTS = frozenset({"clip", "audio", "recording", "speaker", "speaker's", "voice", "voice's"})
# Place words of a frame, each read as its canonical word: the claims' own, and "upper"/"lower" for top/bottom.
PLACE_WORDS = POSITION_WORDS | {"upper": "top", "lower": "bottom"}
# Things only an image can hold: drawn forms and the frame itself.
VISUAL_NOUNS = frozenset(
    {"shape", "circle", "square", "triangle", "rectangle", "oval", "line", "dot", "background", "picture", "image"}
)


@dataclass(frozen=True)
class CheckableClaim:
    """One fact an answer states that the media can confirm or deny."""

    kind: Kind
    text: str  # the answer's own words for it
    subject: str  # the head noun, or the spoken value (a name, a date)
    attributes: tuple[str, ...] = ()
    position: str | None = None  # a place phrase, e.g. "by the window"
    count: int | None = None
    # "there is no green square": the answer says the thing is absent, so its question's right answer is no
    negated: bool = False

    def key(self) -> tuple[str, str, tuple[str, ...], str | None, int | None, bool]:
        return (self.kind, self.subject, self.attributes, self.position, self.count, self.negated)

    def question(self, medium: Medium) -> str:
        """The yes/no verification question about this claim (POPE-style)."""
        if self.kind == "object":
            where = f" {self.position}" if self.position else ""
            if self.count is not None and self.count != 1:
                many = " ".join((*self.attributes, plural(self.subject)))
                number = NUMBER_WORDS[self.count] if self.count < len(NUMBER_WORDS) else str(self.count)
                return f"Are there {number} {many}{where} in the {_noun(medium)}?"
            described = " ".join((*self.attributes, self.subject))
            return f"Is there {article(described)} {described}{where} in the {_noun(medium)}?"
        if self.kind == "attribute":
            verb = "are" if self.subject.endswith("s") and not self.subject.endswith("ss") else "is"
            where = f" {self.position}" if self.position else ""
            return f"In the {_noun(medium)}, {verb} the {self.subject}{where} {' '.join(self.attributes)}?"
        if self.kind == "name":
            return f"Does the speaker say the name {self.subject}?"
        if self.kind in ("date", "time"):
            return f"Does the speaker mention {self.subject}?"
        return f"Does the speaker say the number {self.subject}?"

    def about(self) -> tuple[str, ...]:
        """What the claim is about, in lower case: its subject, and for a fact only heard its values too (the
        speaker's favourite colour is about "purple"), as a label head or a transcript would key the same fact."""
        heard = self.media() == ("audio",)
        about = [self.subject.lower(), *(a.lower() for a in self.attributes if heard)]
        hour = self.hour()
        if hour is not None:  # "one o'clock", "3 pm": a transcript's check of the hour is of its number
            about += [str(NUMBER_WORDS.index(hour))] if hour in NUMBER_WORDS else [hour] if hour.isdigit() else []
        return tuple(dict.fromkeys(about))

    def hour(self) -> str | None:
        """A time's hour as it is written, in lower case ("one o'clock" -> "one", "3:30 pm" -> "3"); None for any
        other claim."""
        return self.subject.split()[0].split(":")[0].lower() if self.kind == "time" else None

    def media(self) -> tuple[Medium, ...]:
        """The media that can speak to it: things and their looks are seen, names, dates, times and numbers heard;
        a thing may also be heard of ("a dog barks", "the speaker mentions an apple"), unless it is a drawn form
        ("three shapes", "a circle") or told by its colour, its size or its place in the frame; an attribute of the
        speaker or the clip ("the speaker's favourite colour is purple") is heard."""
        if self.kind == "object":
            # described by its looks or its place in the frame ("a small yellow star in the centre"), it is seen
            looks = set(self.attributes) & (COLOUR_WORDS | SIZE_WORDS)
            framed = set(words_of(self.position or "")) & PLACE_WORDS.keys()
            return ("image",) if looks or framed or self.subject in VISUAL_NOUNS else ("image", "audio")
        if self.kind == "attribute":
            return ("audio",) if set(self.subject.split()) & _AUDIO_SUBJECTS else ("image",)
        return ("audio",)


def _noun(medium: Medium) -> str:
    return "image" if medium == "image" else "audio clip"


def plural(word: str) -> str:
    if word.endswith("y") and word[-2:-1] not in ("a", "e", "o", "u"):
        return word[:-1] + "ies"
    return word + ("es" if word.endswith(("s", "x", "ch", "sh")) else "s")


def words_of(text: str) -> list[str]:
    """The words of a text, lower case, without their punctuation."""
    return [w.strip(".,!?;:").lower() for w in text.split()]
