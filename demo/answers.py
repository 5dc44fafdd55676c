"""Whether an answer is right for a golden item: the right words and no wrong ones.

An answer's claims are read by `grounding.claims.extract_claims`. An answer is correct when what the question asks
for is present and nothing it asserts contradicts the item's facts (a wrong colour or position of any shape, an
object that is not in the asked medium, a second weekday or name or number). Hallucinated objects are counted
CHAIR-style: objects asserted that are not in the medium the question is about; in audio answers, words for the
speaker (man, woman, person) describe the voice, not an object, and are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from demo.golden import GoldenItem
from grounding.claims import PERSON_NOUNS, Claims, extract_claims, noun_of, spoken_claims


@dataclass(frozen=True)
class Verdict:
    """An answer judged against an item: correct, why not, and its objects for the CHAIR count."""

    correct: bool
    problems: tuple[str, ...]
    objects: frozenset[str]  # objects the answer asserts (speaker words excluded for audio)
    hallucinated: frozenset[str]  # of those, the ones not in the asked medium
    yes_no: str | None


def _singular(noun: str) -> str:
    return noun_of(noun) or noun


def _image_problems(item: GoldenItem, claims: Claims) -> list[str]:
    facts = item.facts
    colours, positions = facts["colours"], facts["positions"]
    problems = [f"{n} is not {c}" for n, c in claims.colours if n in colours and c != colours[n]]
    problems += [f"{n} is not at {p}" for n, p in claims.positions if n in positions and p != positions[n]]
    kind, shape = item.kind, str(facts.get("shape", ""))
    unbound_colours = {c for n, c in claims.colours if n is None}
    if kind in ("which_shapes", "describe"):
        problems += [f"{k} not mentioned" for k in facts["objects"] if k not in claims.objects]
        problems += [f"no {c} shape" for c in unbound_colours if c not in colours.values()]
    elif kind == "colour_of":
        said = claims.colours_of(shape) | unbound_colours
        problems += [] if colours[shape] in said else [f"colour {colours[shape]} not given"]
        problems += [f"{shape} is not {c}" for c in unbound_colours - {colours[shape]}]
    elif kind == "count":
        counted = {v for n, v in claims.numbers if n in (None, "shape")}
        problems += [] if counted == {facts["count"]} else [f"count {sorted(counted)} != {facts['count']}"]
    elif kind == "exists" and claims.yes_no != facts["expected"]:
        problems.append(f"answered {claims.yes_no}, expected {facts['expected']}")
    elif kind == "where":
        said = claims.positions_of(shape) | {p for n, p in claims.positions if n is None}
        problems += [] if said == {positions[shape]} else [f"position {sorted(said)} != {positions[shape]}"]
    return problems


def _only(found: set[str] | set[int], expected: object, what: str) -> list[str]:
    return [] if found == {expected} else [f"{what} {sorted(map(str, found))} != {expected}"]


# The sentence an audio question is about, from its kind or (for a transcript) from the slots the clip has.
_SENTENCE_OF_KIND = {"when": "meeting", "who": "call", "how_many": "count", "favourite_colour": "colour"}
_SENTENCE_OF_SLOT = {"weekday": "meeting", "name": "call", "noun": "count", "colour": "colour"}
# Colours said of the speaker or of "colour" itself ("my favourite colour is red"), or unbound, answer the question.
_COLOUR_HOLDERS = PERSON_NOUNS | {None, "colour", "color"}


def _audio_problems(item: GoldenItem, claims: Claims) -> list[str]:
    facts = item.facts
    if item.kind == "sound":
        # what the voice said need not be repeated, but what is repeated must be what it said
        heard = set(spoken_claims(extract_claims(str(facts["sentence"])))) if facts["sound"] == "speech" else set()
        misheard = [k for k in spoken_claims(claims) if k not in heard]
        said = [f"the clip does not say {value or noun}" for _, noun, value in misheard]
        return _only(claims.sounds, facts["sound"], "sound") + said
    sentence = _SENTENCE_OF_KIND.get(item.kind) or next(v for k, v in _SENTENCE_OF_SLOT.items() if k in facts)
    numbers = {v for _, v in claims.numbers if v > 0}
    if sentence == "meeting":
        hours = {v - 12 if v > 12 else v for v in numbers}
        return _only(claims.weekdays, facts["weekday"], "weekday") + _only(hours, facts["hour"], "hour")
    if sentence == "call":
        return _only(claims.names, facts["name"], "name")
    if sentence == "count":
        noun = _singular(facts["noun"])
        missing = [] if noun in claims.objects else [f"{facts['noun']} not mentioned"]
        return missing + _only(numbers, facts["count"], "count")
    return _only({c for n, c in claims.colours if n in _COLOUR_HOLDERS}, facts["colour"], "colour")


def check_answer(item: GoldenItem, answer: str) -> Verdict:
    """Judges `answer` against `item`: the right words and no wrong ones."""
    claims = extract_claims(answer)
    if item.target == "image":
        objects = frozenset(claims.objects)
        present = {_singular(o) for o in item.facts["objects"]}
        problems = _image_problems(item, claims)
    else:
        objects = frozenset(claims.objects - PERSON_NOUNS)
        present = {_singular(o) for o in item.facts["objects"]}
        problems = _audio_problems(item, claims)
    hallucinated = frozenset(objects - present)
    problems = [f"{o} is not in the {item.target}" for o in sorted(hallucinated)] + problems
    if not answer.strip():
        problems.insert(0, "empty answer")
    return Verdict(not problems, tuple(problems), objects, hallucinated, claims.yes_no)
