"""The routing eval's items (`tessera eval routing`): four slices (text, image, audio, image+audio), split into
train, dev and test with seeds fixed before any router was fitted.

Media items are the grounding world's (`demo.golden.make_item`), each image a world or a free layout at random
(`mixed`), so the test split spans both held-out distributions without reusing their items. Text items are short
questions with answers a checker can read: sums and products, capitals, counts of sides, the days and months in
order, opposites and spelling. Some are easy enough for a small model and some are not, which is what a router has
to tell apart. None is one of the text-keeping prompts `large` was trained to answer as it did before
(`demo.training.text_keep.TEXT_PROMPTS`), and France is left out: its capital is the demo-models check of `small`'s
everyday text.

Seeds. Item `i` of a slice is drawn from `numpy.random.default_rng([split_seed, slice_index, i])`; the three split
seeds are in `demo.golden.RESERVED_SEEDS`, so `training_items` refuses them.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from demo.answers import Verdict, check_answer
from demo.golden import ROUTING_SEEDS, GoldenItem, make_item
from grounding.claims import WEEKDAYS
from grounding.spoken_claims import MONTHS

SLICES = ("text", "image", "audio", "image+audio")
SPLIT_SEEDS = ROUTING_SEEDS
# Items per slice: the test split holds 800 (200 a slice); smoke runs take the first few of each slice.
SPLIT_SIZES = {"train": 120, "dev": 80, "test": 200}

CAPITALS = {
    "Portugal": "Lisbon",
    "Greece": "Athens",
    "Norway": "Oslo",
    "Sweden": "Stockholm",
    "Finland": "Helsinki",
    "Denmark": "Copenhagen",
    "Poland": "Warsaw",
    "Austria": "Vienna",
    "Ireland": "Dublin",
    "Egypt": "Cairo",
    "Kenya": "Nairobi",
    "China": "Beijing",
    "India": "New Delhi",
    "Russia": "Moscow",
    "Australia": "Canberra",
    "Argentina": "Buenos Aires",
    "Peru": "Lima",
    "Mexico": "Mexico City",
    "Thailand": "Bangkok",
    "Turkey": "Ankara",
    "Hungary": "Budapest",
    "Belgium": "Brussels",
    "the Netherlands": "Amsterdam",
    "Switzerland": "Bern",
}
SIDES = {"triangle": 3, "square": 4, "pentagon": 5, "hexagon": 6, "octagon": 8}
DAYS = WEEKDAYS
OPPOSITES = {"up": "down", "big": "small", "fast": "slow", "light": "dark", "open": "closed", "early": "late"}
WORDS = ("cat", "tree", "house", "river", "apple", "green", "music", "table")
NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]
TEXT_KINDS = ("sum", "product", "capital", "sides", "next_day", "next_month", "opposite", "spell")


def _text_question(kind: str, rng: np.random.Generator) -> tuple[str, str, list[str]]:
    """(question, reference answer, the words any right answer holds: one of them, as a whole word)."""
    if kind == "sum":
        a, b = (int(x) for x in rng.integers(2, 50, size=2))
        return f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}.", _number(a + b)
    if kind == "product":
        a, b = (int(x) for x in rng.integers(2, 13, size=2))
        return f"What is {a} times {b}?", f"{a} times {b} is {a * b}.", _number(a * b)
    if kind == "capital":
        country = str(rng.choice(sorted(CAPITALS)))
        city = CAPITALS[country]
        return f"What is the capital of {country}?", f"The capital of {country} is {city}.", [city]
    if kind == "sides":
        shape = str(rng.choice(sorted(SIDES)))
        return f"How many sides does a {shape} have?", f"A {shape} has {SIDES[shape]} sides.", _number(SIDES[shape])
    if kind == "next_day":
        day = int(rng.integers(len(DAYS)))
        after = DAYS[(day + 1) % len(DAYS)]
        return f"Which day of the week comes after {DAYS[day]}?", f"{after} comes after {DAYS[day]}.", [after]
    if kind == "next_month":
        month = int(rng.integers(len(MONTHS)))
        after = MONTHS[(month + 1) % len(MONTHS)]
        return f"Which month comes after {MONTHS[month]}?", f"{after} comes after {MONTHS[month]}.", [after]
    if kind == "opposite":
        word = str(rng.choice(sorted(OPPOSITES)))
        return f"What is the opposite of {word}?", f"The opposite of {word} is {OPPOSITES[word]}.", [OPPOSITES[word]]
    word = str(rng.choice(WORDS))
    spelled = word[::-1]
    return f"Spell the word '{word}' backwards.", f"'{word}' backwards is '{spelled}'.", [spelled]


def _number(n: int) -> list[str]:
    return [str(n), NUMBER_WORDS[n]] if n < len(NUMBER_WORDS) else [str(n)]


def text_item(item_id: str, seed: int, index: int) -> GoldenItem:
    """Text item `index`: its kind cycles with `index`, the rest is drawn from `seed`."""
    kind = TEXT_KINDS[index % len(TEXT_KINDS)]
    question, answer, accept = _text_question(kind, np.random.default_rng(seed))
    return GoldenItem(item_id, seed, "text", "text", kind, question, answer, {"accept": accept})


def _seed(split_seed: int, slice_name: str, index: int) -> int:
    return int(np.random.SeedSequence([split_seed, SLICES.index(slice_name), index]).generate_state(1)[0])


def split_items(split: str, per_slice: int | None = None) -> list[GoldenItem]:
    """The items of `split` (train, dev or test), `per_slice` of each slice (default: the split's size), slices
    interleaved so that a prefix of the list holds every slice."""
    if split not in SPLIT_SEEDS:
        raise ValueError(f"split must be one of {', '.join(SPLIT_SEEDS)}, not {split!r}")
    count = SPLIT_SIZES[split] if per_slice is None else per_slice
    items: list[GoldenItem] = []
    for i in range(count):
        for slice_name in SLICES:
            seed = _seed(SPLIT_SEEDS[split], slice_name, i)
            tag = slice_name.replace("image", "img").replace("audio", "aud").replace("+", "")
            item_id = f"route-{split}-{tag}-{i:04d}"
            if slice_name == "text":
                items.append(text_item(item_id, seed, i))
            else:
                items.append(make_item(item_id, seed, slice_name, i, layout="mixed"))
    return items


def check_routing_answer(item: GoldenItem, answer: str) -> Verdict:
    """A text item is right when its answer holds one of the accepted words as a whole word (case aside); a media
    item is judged as the grounding eval judges it (demo.answers)."""
    if item.mix != "text":
        return check_answer(item, answer)
    accept: list[Any] = item.facts["accept"]
    text = " ".join(re.findall(r"[a-z0-9]+", answer.lower()))  # words only: quotes and stops aside
    found = any(re.search(rf"(?<![a-z0-9]){re.escape(str(a).lower())}(?![a-z0-9])", text) for a in accept)
    problems: tuple[str, ...] = () if found else (f"none of {', '.join(map(str, accept))} in the answer",)
    if not answer.strip():
        problems = ("empty answer",)
    return Verdict(not problems, problems, frozenset(), frozenset(), None)
