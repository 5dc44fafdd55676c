"""Open questions for the judge: a count, a colour or a place in an image, and a day, an hour, a count or a colour
heard in a clip, are checked by asking for them, not by a yes/no about them.

A yes/no question names the value it asks about ("Are there three shapes in the image?", "In the image, is the
triangle blue?"), and a model tends to agree with whatever count, colour or place it is offered, or to doubt a
right one it would have named itself. Asked openly ("How many shapes are there in the image?", "What colour is the
triangle in the image?"), the model states its own value, and the judge reads how likely the claimed one was at
that point of its answer: at the first token of the answer that names a value of the slot (a number, a colour, a
place word), the probability of the claimed value against every value of the slot among that token's
alternatives (its logprobs). A place of two words ("top left") multiplies the probabilities at the answer's first
two place words. An answer that names no value gives no judgement.

A claim of a colour or a place also asserts the thing ("a red square at the top left"): the judge asks whether the
thing is there (yes/no, without its colour and place: "Is there a square in the image?") and each open question,
and the claim's support is their product.

Heard, a claim names what the speaker said: "What day does the speaker mention?" (a weekday), "What time does the
speaker mention?" (the hour's number), "How many cups does the speaker mention?", "What colour does the speaker
mention?" (a colour of the speaker or the clip: "the speaker's favourite colour is yellow"). Asked "Does the
speaker mention Friday?" about a clip that says Saturday, a model tends to agree; asked openly, it names the day
it heard. The open question alone checks such a claim; a count heard also asks whether the things are mentioned
at all ("Is there a cup in the audio clip?"), since "How many books does the speaker mention?" of a clip that counts
cups is answered with the cups' number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from grounding.checkable_claim import PLACE_WORDS, CheckableClaim, Medium, plural, words_of
from grounding.claims import COLOUR_NAMES, COLOUR_WORDS, NUMBER_WORDS, WEEKDAYS
from serving.engines.base import TokenLogprob

ANSWER_TOKENS = 16  # room for "In the image, there are three red circles." and the like


@dataclass(frozen=True)
class OpenQuestion:
    """A question whose answer names a value of one slot, and the value the claim states."""

    text: str
    slot: str  # "count" | "colour" | "place" | "day" | "hour"
    claimed: tuple[str, ...]  # the claimed value: a number, a colour, a weekday, or one or two canonical place words


def open_questions(claim: CheckableClaim, medium: Medium) -> list[OpenQuestion]:
    """The open questions that check the claim's count, colour or place in an image, or the day, hour, count or
    colour it says was heard; none for any other claim (a claim of absence, a name, a place on no list such as "by
    the window")."""
    if claim.negated:
        return []
    if medium == "audio":
        return _heard(claim)
    if claim.kind not in ("object", "attribute"):
        return []
    colours = _colours(claim)
    rest = [a for a in claim.attributes if a not in COLOUR_WORDS]
    described = " ".join((*claim.attributes, claim.subject)) if claim.kind == "object" else claim.subject
    if claim.kind == "object" and claim.count is not None:
        return [OpenQuestion(f"How many {plural(described)} are there in the image?", "count", (_number(claim.count),))]
    many = claim.count is not None and claim.count != 1
    thing = " ".join((*rest, claim.subject)) if claim.kind == "object" else claim.subject
    out = []
    if len(colours) == 1:
        verb = "are" if many else "is"
        out.append(OpenQuestion(f"What colour {verb} the {thing} in the image?", "colour", (colours[0],)))
    places = place_words(claim.position or "")
    if places:
        out.append(OpenQuestion(f"Where {'are' if many else 'is'} the {described} in the image?", "place", places))
    return out


def _heard(claim: CheckableClaim) -> list[OpenQuestion]:
    """The open question that checks a fact heard: a weekday, an hour, a count of things, a colour of the speaker's."""
    if claim.kind == "date" and claim.subject.capitalize() in WEEKDAYS:
        return [OpenQuestion("What day does the speaker mention?", "day", (claim.subject.lower(),))]
    if claim.kind == "time":
        hour = _value(claim.hour() or "", "hour")
        return [OpenQuestion("What time does the speaker mention?", "hour", (hour,))] if hour else []
    if claim.kind == "object" and claim.count is not None:
        described = plural(" ".join((*claim.attributes, claim.subject)))
        return [OpenQuestion(f"How many {described} does the speaker mention?", "count", (_number(claim.count),))]
    colours = _colours(claim)
    if claim.kind == "attribute" and len(colours) == 1 and claim.media() == ("audio",):
        return [OpenQuestion("What colour does the speaker mention?", "colour", (colours[0],))]
    return []


def _colours(claim: CheckableClaim) -> list[str]:
    """The colours among the claim's attributes, each by its canonical name."""
    return [COLOUR_NAMES.get(a, a) for a in claim.attributes if a in COLOUR_WORDS]


def thing_of(claim: CheckableClaim) -> CheckableClaim:
    """The thing a claim of a colour or a place is about, without them: "a large red square at the top" -> "a large
    square"; "the triangle is blue" -> "a triangle"."""
    rest = tuple(a for a in claim.attributes if a not in COLOUR_WORDS)
    return CheckableClaim(
        "object", claim.text, claim.subject, rest if claim.kind == "object" else (), count=claim.count
    )


def place_words(phrase: str) -> tuple[str, ...]:
    """The canonical place words of a phrase, in order, at most two: "at the top left" -> ("top", "left")."""
    words = [PLACE_WORDS[w] for w in words_of(phrase) if w in PLACE_WORDS]
    return tuple(dict.fromkeys(words))[:2]


def value_support(tokens: Sequence[TokenLogprob], question: OpenQuestion) -> float | None:
    """The probability of the claimed value where the answer (its tokens, each with its alternatives) first names
    a value of the question's slot; None when it names none."""
    wanted = list(question.claimed)
    support = 1.0
    for token in tokens:
        value = _value(token.token, question.slot)
        if value is None:
            continue
        seen = {token.token: token.logprob, **dict(token.top)}
        mass: dict[str, float] = {}
        for text, logprob in seen.items():
            v = _value(text, question.slot)
            if v is not None:
                mass[v] = mass.get(v, 0.0) + math.exp(logprob)
        support *= mass.get(wanted.pop(0), 0.0) / sum(mass.values())
        if not wanted or question.slot != "place":
            return support
    return None if len(wanted) == len(question.claimed) else support


def _value(token: str, slot: str) -> str | None:
    word = "".join(words_of(token))
    if slot == "place":
        return PLACE_WORDS.get(word)
    if slot == "colour":
        return COLOUR_NAMES.get(word, word) if word in COLOUR_WORDS else None
    if slot == "day":
        return word if word.capitalize() in WEEKDAYS else None
    if word.isdigit():
        return _number(int(word))
    return word if word in NUMBER_WORDS else None


def _number(n: int) -> str:
    return NUMBER_WORDS[n] if 0 <= n < len(NUMBER_WORDS) else str(n)
