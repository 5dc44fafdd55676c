"""The claims of a free-text answer: what it asserts, read by rule over a vocabulary of plain English words.

Extraction goes clause by clause (clauses end at . ! ? ; : , and new lines):
- objects: shapes, everyday things speech mentions, people, and common things a model invents for an image it
  cannot see (woman, dress, car, tree...). A mention after a negation in its clause ("there is no red star",
  "I don't see a star") asserts nothing and is dropped.
- colours and positions, bound to an object: a colour to the noun right after it (size words may sit between:
  "a large red circle"), else to the nearest object noun before it in the clause ("the circle is red"); a
  position to the nearest noun before it, else the nearest shape after it ("on the left is a circle"). Bound to
  no noun, a colour or position is kept unbound (the answer "Red."); bound to scenery ("a white background")
  it says nothing about an object.
- numbers (digits and number words to twenty) with the noun they count ("one" only when it counts a noun, tells
  the time or ends its clause, not as a pronoun); yes/no (the first yes or no word; none when the answer has
  neither); given names, weekdays, hours and sound labels (speech, beep, silence, noise).

The evidence checkers (grounding.image_evidence, grounding.audio_evidence) check these claims one by one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SHAPES = ("circle", "square", "triangle", "star")
COLOURS = (
    "red", "green", "blue", "yellow", "orange", "purple", "black",
    "white", "grey", "gray", "pink", "brown", "violet", "gold", "silver",
)  # fmt: skip
NUMBER_WORDS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty",
)  # fmt: skip
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
# Common English given names: a name an answer says is a claim about who a clip names.
GIVEN_NAMES = (
    "James", "Mary", "John", "Linda", "Robert", "Sarah", "David", "Emma", "Michael", "Olivia",
    "William", "Elizabeth", "Richard", "Patricia", "Thomas", "Jennifer", "Charles", "Barbara", "Daniel", "Susan",
    "Matthew", "Jessica", "Anthony", "Karen", "Mark", "Nancy", "Paul", "Lisa", "Steven", "Emily",
    "Andrew", "Sophia", "Peter", "Anna", "George", "Laura", "Oliver", "Grace", "Jack", "Alice",
)  # fmt: skip
# Written capitalised: how a recogniser's words become a sentence (grounding.hearing).
PROPER_NOUNS = frozenset(w.lower() for w in (*GIVEN_NAMES, *WEEKDAYS))


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_TOKEN = re.compile(r"\d+|[a-z]+(?:'[a-z]+)?")
_CLAUSE = re.compile(r"[.!?;:,\n]+")
SHAPE_NOUNS = frozenset(SHAPES)
AUDIO_NOUNS = frozenset({"apple", "book", "cup", "chair", "dog", "cat", "table"})
PERSON_NOUNS = frozenset({"person", "man", "woman", "girl", "boy", "child", "baby", "lady", "speaker"})
OTHER_NOUNS = _words(
    "dress hat shirt shoe car bus truck bicycle bike tree flower grass plant house building window door "
    "road street sky cloud sun moon mountain water sea river bird horse cow sheep ball bottle phone "
    "computer laptop clock lamp bed sofa couch cake pizza food fruit banana box bag kite umbrella plate "
    "bowl spoon knife fork boat plane rectangle oval hexagon pentagon diamond heart cross arrow ring dot "
    "letter logo flag face hand"
)
OBJECT_NOUNS = SHAPE_NOUNS | AUDIO_NOUNS | PERSON_NOUNS | OTHER_NOUNS
# Nouns that anchor a colour or position without being objects: "a white background", "the middle of the image".
SCENERY_NOUNS = _words(
    "background image picture photo photograph canvas noise shape clip audio recording sound colour color side"
)
_IRREGULAR = {"people": "person", "men": "man", "women": "woman", "children": "child", "ladies": "lady"}

COLOUR_NAMES = {"gray": "grey"}  # spellings of one colour, read as its canonical name
COLOUR_WORDS = frozenset(COLOURS)
POSITION_WORDS = {"left": "left", "right": "right", "top": "top", "bottom": "bottom", "centre": "centre"}
POSITION_WORDS |= {"center": "centre", "middle": "centre"}
SIZE_WORDS = frozenset({"small", "large", "big", "little", "tiny", "huge", "medium"})
_SKIPPABLE = SIZE_WORDS | {"a", "an", "the", "any", "one", "some", "single", "bright", "dark", "light", "solid"}
NEGATORS = frozenset({"no", "not", "without", "nor", "neither", "never", "none"})
YES_WORDS = frozenset({"yes", "yeah", "yep", "correct"})
NO_WORDS = frozenset({"no", "nope"})
SOUND_WORDS = {
    "speech": {"speech", "speaking", "speaks", "speaker", "voice", "says", "said", "saying", "talking", "spoken"},
    "beep": {"beep", "beeping", "tone", "whistle", "sine"},
    "silence": {"silence", "silent", "nothing", "quiet"},
    "noise": {"noise", "static", "hiss", "hissing"},
}
_NUMBER = {word: value for value, word in enumerate(NUMBER_WORDS)}
_NAMES = {n.lower(): n for n in GIVEN_NAMES}
_WEEKDAYS = {d.lower(): d for d in WEEKDAYS}


def noun_of(token: str) -> str | None:
    """The canonical singular of an object or scenery noun, or None."""
    if token in _IRREGULAR:
        return _IRREGULAR[token]
    for base in (token, token[:-1] if token.endswith("s") else "", token[:-2] if token.endswith("es") else ""):
        if base and (base in OBJECT_NOUNS or base in SCENERY_NOUNS):
            return base
    return None


def _number(token: str) -> int | None:
    if token.isdigit():
        return int(token)
    return _NUMBER.get(token)


def _negated(tokens: list[str], index: int) -> bool:
    return any(t in NEGATORS or t.endswith("n't") for t in tokens[:index])


@dataclass
class Claims:
    """What an answer asserts. Bindings are (noun or None when unbound, value)."""

    objects: set[str] = field(default_factory=set)
    colours: list[tuple[str | None, str]] = field(default_factory=list)
    positions: list[tuple[str | None, str]] = field(default_factory=list)
    numbers: list[tuple[str | None, int]] = field(default_factory=list)
    yes_no: str | None = None
    names: set[str] = field(default_factory=set)
    weekdays: set[str] = field(default_factory=set)
    sounds: set[str] = field(default_factory=set)

    def colours_of(self, noun: str) -> set[str]:
        return {c for n, c in self.colours if n == noun}

    def positions_of(self, noun: str) -> set[str]:
        return {p for n, p in self.positions if n == noun}


def _bind_after(tokens: list[str], index: int) -> str | None:
    """The noun right after `index`, over articles and size words ('red circle', 'large red circle')."""
    for token in tokens[index + 1 : index + 4]:
        if (noun := noun_of(token)) is not None:
            return noun
        if token not in _SKIPPABLE and token not in COLOUR_WORDS:
            return None
    return None


def _bind_before(nouns: list[tuple[int, str]], index: int) -> str | None:
    """The nearest object noun before `index`, else the nearest scenery noun ("the circle's colour is red")."""
    before = [noun for at, noun in nouns if at < index]
    objects = [noun for noun in before if noun in OBJECT_NOUNS]
    return objects[-1] if objects else (before[-1] if before else None)


def _clause(tokens: list[str], claims: Claims) -> None:
    nouns = [(i, n) for i, t in enumerate(tokens) if (n := noun_of(t)) is not None]
    for i, noun in nouns:
        if noun in OBJECT_NOUNS and not _negated(tokens, i):
            claims.objects.add(noun)
    for i, token in enumerate(tokens):
        if _negated(tokens, i):
            continue
        if token in COLOUR_WORDS and tokens[i + 1 : i + 2] == ["noise"]:
            continue  # "white noise" (or pink, brown) names a sound, not a colour
        if token in COLOUR_WORDS:
            bound = _bind_after(tokens, i) or _bind_before(nouns, i)
            claims.colours.append((bound, COLOUR_NAMES.get(token, token)))
        elif token in POSITION_WORDS:
            bound = _bind_before(nouns, i) or next((n for at, n in nouns if at > i and n in SHAPE_NOUNS), None)
            if bound is None or bound in OBJECT_NOUNS:
                claims.positions.append((bound, POSITION_WORDS[token]))
        elif (value := _number(token)) is not None:
            counted = _bind_after(tokens, i)
            # "the one who...", "one of them": a pronoun, unless it counts a noun or ends the clause ("Just one.").
            clock = tokens[i + 1 : i + 2] in (["o'clock"], ["am"], ["pm"])
            if value != 1 or token.isdigit() or counted is not None or clock or i == len(tokens) - 1:
                claims.numbers.append((counted, value))


def extract_claims(answer: str) -> Claims:
    claims = Claims()
    text = re.sub(r"'s\b", "", answer.lower().replace("’", "'"))
    all_tokens = _TOKEN.findall(text)
    for token in all_tokens:
        if token in _NAMES:
            claims.names.add(_NAMES[token])
        if token in _WEEKDAYS:
            claims.weekdays.add(_WEEKDAYS[token])
        claims.sounds.update(label for label, words in SOUND_WORDS.items() if token in words)
    if all_tokens and (all_tokens[0] in YES_WORDS or all_tokens[0] in NO_WORDS):
        claims.yes_no = "yes" if all_tokens[0] in YES_WORDS else "no"
    else:
        found = [t for t in all_tokens if t in YES_WORDS or t in NO_WORDS]
        if found:
            claims.yes_no = "yes" if found[0] in YES_WORDS else "no"
    for clause in _CLAUSE.split(text):
        tokens = _TOKEN.findall(clause)
        if tokens:
            _clause(tokens, claims)
    return claims


SpokenKey = tuple[str, str | None, str]  # (kind, bound noun or None, value)


def spoken_claims(claims: Claims) -> list[SpokenKey]:
    """Keys of what an answer or transcript says about a clip's content: names, days, numbers, colours not of a
    shape, and things of the spoken world (keyed as an image's objects are, so that with both media a thing the
    clip speaks of is supported by it)."""
    out: list[SpokenKey] = [("name", None, n) for n in sorted(claims.names)]
    out += [("day", None, d) for d in sorted(claims.weekdays)]
    out += [("number", None, str(v)) for noun, v in claims.numbers if noun is None or noun in AUDIO_NOUNS]
    out += [("colour", None, c) for noun, c in claims.colours if noun is None or noun not in SHAPE_NOUNS]
    out += [("object", o, "") for o in sorted(claims.objects & AUDIO_NOUNS)]
    return list(dict.fromkeys(out))


def article(word: str) -> str:
    """'an' before a vowel sound ('an orange circle'), else 'a'."""
    return "an" if word[:1].lower() in "aeiou" else "a"
