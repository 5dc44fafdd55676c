"""Open questions for the judge: a count or a place is checked by asking for it, not by a yes/no about it.

A yes/no question names the value it asks about ("Are there three shapes in the image?"), and a model tends to say
yes to whatever count or place it is offered. Asked openly ("How many shapes are there in the image?"), the model
states its own value, and the judge reads how likely the claimed one was at that point of its answer: at the first
token of the answer that names a value of the slot (a number; a place word), the probability of the claimed value
against every value of the slot among that token's alternatives (its logprobs). A place of two words ("top left")
multiplies the probabilities at the answer's first two place words. An answer that names no value gives no
judgement.

A claim of a place also asserts the thing ("a red square at the top left"): the judge asks whether it is there
(yes/no, without the place) and where it is, and the claim's support is the product of the two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from grounding.checkable_claim import CheckableClaim, Medium, plural
from grounding.claims import NUMBER_WORDS
from serving.engines.base import TokenLogprob

ANSWER_TOKENS = 16  # room for "In the image, there are three red circles." and the like
# Place words, each read as its canonical word: "middle" and "center" are the centre, "upper" the top.
_PLACES = {
    "left": "left",
    "right": "right",
    "top": "top",
    "upper": "top",
    "bottom": "bottom",
    "lower": "bottom",
    "centre": "centre",
    "center": "centre",
    "middle": "centre",
}


@dataclass(frozen=True)
class OpenQuestion:
    """A question whose answer names a value of one slot, and the value the claim states."""

    text: str
    slot: str  # "count" | "place"
    claimed: tuple[str, ...]  # the claimed value: a number, or one or two canonical place words


def open_question(claim: CheckableClaim, medium: Medium) -> OpenQuestion | None:
    """The open question that checks the claim's count or place in an image; None for any other claim (a claim of
    absence, a fact heard, a place on no list such as "by the window")."""
    if medium != "image" or claim.negated or claim.kind not in ("object", "attribute"):
        return None
    described = " ".join((*claim.attributes, claim.subject)) if claim.kind == "object" else claim.subject
    if claim.kind == "object" and claim.count is not None:
        return OpenQuestion(
            f"How many {plural(described)} are there in the image?", "count", (_number_word(claim.count),)
        )
    places = place_words(claim.position or "")
    if places:
        verb = "are" if claim.count is not None and claim.count != 1 else "is"
        return OpenQuestion(f"Where {verb} the {described} in the image?", "place", places)
    return None


def place_words(phrase: str) -> tuple[str, ...]:
    """The canonical place words of a phrase, in order, at most two: "at the top left" -> ("top", "left")."""
    words = [_PLACES[w] for w in _words(phrase) if w in _PLACES]
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
        if not wanted or question.slot == "count":
            return support
    return None if len(wanted) == len(question.claimed) else support


def _value(token: str, slot: str) -> str | None:
    word = token.strip().strip(".,!?;:").lower()
    if slot == "place":
        return _PLACES.get(word)
    if word.isdigit():
        return _number_word(int(word))
    return word if word in NUMBER_WORDS else None


def _number_word(n: int) -> str:
    return NUMBER_WORDS[n] if 0 <= n < len(NUMBER_WORDS) else str(n)


def _words(text: str) -> list[str]:
    return [w.strip(".,!?;:").lower() for w in text.split()]
