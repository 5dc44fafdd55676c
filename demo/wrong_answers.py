"""Wrong answers made from right ones: a golden item's reference answer with one fact changed.

The guardrail's recall is measured on these (`tessera eval grounding --wrong-answers`), not only on the model's own
few mistakes, and the judge's training questions ask about them (demo.training.verify). Each change swaps one fact
word of the answer for another of its vocabulary that the item's media contradict:
- a shape's colour for another colour (each kind appears once in a scene, so the shape now has the wrong colour);
- a shape's kind for a kind the scene does not hold;
- a position for another position, a count for another count;
- a yes/no answer for its opposite;
- a spoken weekday, hour, name, number, counted thing or colour for another;
- the kind of sound for another kind.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import numpy as np

from demo.golden import POSITION_PHRASE, GoldenItem
from demo.speech import COUNT_NOUNS, NAMES, SPEECH_COLOURS, WEEKDAYS, number_word
from demo.world import COLOURS, SHAPES
from grounding.claims import article

SOUND_ANSWERS = {
    "beep": "A beep: a pure tone.",
    "silence": "Silence: there is no sound.",
    "noise": "White noise, a steady hiss.",
    "speech": 'A voice saying: "Please call Mary."',
}
_NUMBERS = tuple(number_word(n) for n in range(1, 21))


def _swap(answer: str, words: tuple[str, ...], rng: np.random.Generator, allowed: Callable[[str, str], bool]) -> str:
    """`answer` with one of `words` it says (whole words, any case) replaced by another of them that `allowed`
    (old, new) accepts; the answer itself when it says none of them or no replacement is allowed."""
    found = [m for w in words for m in re.finditer(rf"\b{re.escape(w)}\b", answer, re.IGNORECASE)]
    rng.shuffle(found)  # type: ignore[arg-type]
    for match in found:
        old = match.group(0).lower()
        options = [w for w in words if w.lower() != old and allowed(old, w)]
        if options:
            new = options[int(rng.integers(len(options)))]
            new = new[:1].upper() + new[1:] if match.group(0)[:1].isupper() else new
            changed = answer[: match.start()] + new + answer[match.end() :]
            # "a orange circle" reads wrong: fix the article before a swapped word
            return re.sub(r"\b([Aa]n?) (\w+)", _article, changed)
    return answer


def _any(old: str, new: str) -> bool:
    return True


def _article(match: re.Match[str]) -> str:
    word = match.group(2)
    if word.lower() not in COLOURS + SHAPES:
        return match.group(0)
    a = article(word)
    return f"{a.capitalize() if match.group(1)[0].isupper() else a} {word}"


def _image_change(item: GoldenItem, rng: np.random.Generator) -> str:
    facts = item.facts
    answer = item.answer
    if item.kind == "exists":
        colour, shape = facts["colour"], facts["shape"]
        if facts["expected"] == "yes":
            return f"No, there is no {colour} {shape}."
        return f"Yes, there is {article(colour)} {colour} {shape}."
    if item.kind == "count":
        n = int(facts["count"])
        others = [k for k in range(1, len(SHAPES) + 1) if k != n]
        k = others[int(rng.integers(len(others)))]
        return f"There {'is' if k == 1 else 'are'} {number_word(k)} shape{'s' * (k != 1)}."
    present = set(facts["objects"])
    changes: list[Callable[[], str]] = [lambda: _swap(answer, COLOURS, rng, lambda old, new: True)]
    if item.kind in ("which_shapes", "describe") and len(present) < len(SHAPES):
        changes.append(lambda: _swap(answer, SHAPES, rng, lambda old, new: new not in present))
    if item.kind in ("where", "describe"):
        phrases = tuple(POSITION_PHRASE.values())
        changes.append(lambda: _swap(answer, phrases, rng, lambda old, new: True))
    return _first_change(answer, changes, rng)


def _first_change(answer: str, changes: list[Callable[[], str]], rng: np.random.Generator) -> str:
    """The first of `changes`, tried in a random order, that changes `answer` (else `answer`)."""
    for i in rng.permutation(len(changes)):
        changed = changes[int(i)]()
        if changed != answer:
            return changed
    return answer


def _audio_change(item: GoldenItem, rng: np.random.Generator) -> str:
    facts = item.facts
    answer = item.answer
    if item.kind == "sound":
        others = [s for s in SOUND_ANSWERS if s != facts["sound"]]
        return SOUND_ANSWERS[others[int(rng.integers(len(others)))]]
    hours = tuple(f"{number_word(h)} o'clock" for h in range(1, 13))
    vocabularies = (WEEKDAYS, hours, NAMES, COUNT_NOUNS, SPEECH_COLOURS, _NUMBERS)
    changes: list[Callable[[], str]] = [functools.partial(_swap, answer, words, rng, _any) for words in vocabularies]
    return _first_change(answer, changes, rng)


def one_fact_changed(item: GoldenItem, rng: np.random.Generator) -> str:
    """The item's reference answer with one fact changed so that its media contradict it; ValueError when the
    answer holds no fact to change."""
    changed = _image_change(item, rng) if item.target == "image" else _audio_change(item, rng)
    if changed == item.answer:
        raise ValueError(f"item {item.id}: no fact to change in {item.answer!r}")
    return changed
