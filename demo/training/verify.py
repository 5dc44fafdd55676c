"""The judge's questions as training items: yes/no verification of one claim against the item's media.

The grounding judge (grounding.judge) asks a pool "Is there a red square in the image? Answer yes or no." for each
checkable claim of an answer, and reads P(yes) from its first token. `verify_item` turns a golden item into such a
question, worded as the judge words it most of the time and otherwise in other words, answered "Yes." or "No.":
- a claim of the item's right answer (extracted as the judge extracts it), or of a wrong answer made by changing
  one fact (demo.wrong_answers), the changed claim answered "No.";
- the whole answer, right or wrong, as the judge asks about an answer with no checkable claim;
- a thing no scene of the world holds ("a giraffe by the window"), answered "No.", and the light background,
  answered "Yes.".
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from demo.golden import GoldenItem
from demo.wrong_answers import one_fact_changed
from grounding.checkable import CheckableClaim, Medium, checkable_claims
from grounding.judge import question_for

# Things people ask about that no scene of the world holds, some with a place of their own.
ABSENT_THINGS = ("giraffe", "dog", "cat", "tree", "car", "person", "window", "cup", "house", "bird", "flower", "boat")
ABSENT_PLACES = (None, None, "by the window", "on the table", "in the corner", "next to the door")
WORDINGS = (  # the judge's own suffix, then others
    "{q} Answer yes or no.",
    "{q} Answer yes or no.",
    "{q} Answer yes or no.",
    "{q} Reply with yes or no.",
    "{q}",
    "Answer yes or no: {q}",
)
YES, NO = "Yes.", "No."


_FILLER = frozenset({"is", "are", "a", "an", "the", "there", "shape", "shapes", "no", "yes"})


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z']+", text.lower()))


def _key_set(answer: str) -> set[tuple[object, ...]]:
    return {c.key() for c in checkable_claims(answer)}


def _worded(question: str, rng: np.random.Generator) -> str:
    """`question` (the judge's, ending "Answer yes or no.") in one of WORDINGS."""
    bare = question.removesuffix(" Answer yes or no.")
    return WORDINGS[int(rng.integers(len(WORDINGS)))].format(q=bare)


def _claim_question(item: GoldenItem, rng: np.random.Generator) -> tuple[str, str]:
    """A question about one claim of a right or a wrong answer, and its answer."""
    medium: Medium = "image" if item.target == "image" else "audio"
    wrong = bool(rng.random() < 0.5)
    answer = one_fact_changed(item, rng) if wrong else item.answer
    claims = [c for c in checkable_claims(answer) if medium in c.media()]
    if wrong:
        # the changed fact's claims: new to the wrong answer, and asking about a word the change brought in
        right, brought = _key_set(item.answer), _words(answer) - _words(item.answer) - _FILLER
        claims = [c for c in claims if c.key() not in right and brought & _words(question_for(c, medium, whole=False))]
    if len(claims) != 1 and (wrong or not claims):
        # a changed fact the extractor reads as more than one claim (or none): ask about the whole answer
        return question_for(CheckableClaim("object", answer, answer), medium, whole=True), NO if wrong else YES
    claim = claims[int(rng.integers(len(claims)))]
    # a claim that a thing is absent ("there is no green square") is asked as whether the thing is there
    return question_for(claim, medium, whole=False), YES if wrong == claim.negated else NO


def _whole_question(item: GoldenItem, rng: np.random.Generator) -> tuple[str, str]:
    medium: Medium = "image" if item.target == "image" else "audio"
    wrong = bool(rng.random() < 0.5)
    answer = one_fact_changed(item, rng) if wrong else item.answer
    return question_for(CheckableClaim("object", answer, answer), medium, whole=True), NO if wrong else YES


def _image_extra_question(rng: np.random.Generator) -> tuple[str, str]:
    """A thing no scene holds (no), or the scene's light background (yes), as the judge would ask them."""
    if rng.random() < 0.5:
        thing = ABSENT_THINGS[int(rng.integers(len(ABSENT_THINGS)))]
        place = ABSENT_PLACES[int(rng.integers(len(ABSENT_PLACES)))]
        return question_for(CheckableClaim("object", thing, thing, position=place), "image", whole=False), NO
    light = bool(rng.random() < 0.5)
    claim = CheckableClaim("attribute", "the background", "background", attributes=("light" if light else "dark",))
    return question_for(claim, "image", whole=False), YES if light else NO


def verify_item(item: GoldenItem, rng: np.random.Generator) -> GoldenItem:
    """`item`'s media asked one yes/no verification question about its target medium instead of its own."""
    draw = rng.random()
    if item.target == "image" and draw < 0.2:
        question, answer = _image_extra_question(rng)
    elif draw < 0.8:
        question, answer = _claim_question(item, rng)
    else:
        question, answer = _whole_question(item, rng)
    return dataclasses.replace(item, kind="verify", question=_worded(question, rng), answer=answer)
