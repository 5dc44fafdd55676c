"""What kind of question a request asks about its media, for slicing grounding figures: a rule per kind.

About an image: `which_shapes`, `colour_of`, `count`, `exists`, `where`, `describe`; about audio: `transcript`,
`when`, `who`, `how_many`, `favourite_colour`, `sound`; anything else is `other`. The rules read the question's
wording only, first match wins, and are checked against every wording of the demo's golden sets
(tests/unit/grounding/test_questions.py), so real traffic that asks the same things in other words may land in
`other`, which is what the slice then says.
"""

from __future__ import annotations

import re

OTHER = "other"
IMAGE_KINDS = ("which_shapes", "colour_of", "count", "exists", "where", "describe")
AUDIO_KINDS = ("transcript", "when", "who", "how_many", "favourite_colour", "sound")
_SHAPE = r"(circle|square|triangle|star)s?"
_RULES: tuple[tuple[str, str], ...] = (
    ("favourite_colour", r"favou?rite colou?r|colou?r does the speaker|like best"),
    ("how_many", r"on the table|speaker count"),
    ("when", r"\bwhen\b|what day|what time|which day"),
    ("who", r"\bcall\b|\bwho\b"),
    ("transcript", r"\bsa(y|id)\b|transcribe|what is said"),
    ("sound", r"\bhear\b|what sound|describe the (audio|clip|recording)"),
    ("exists", rf"^(is there|are there|can you see|does the (picture|image) contain|do you see)\b.*{_SHAPE}"),
    ("where", r"\bwhere\b|which part"),
    ("colour_of", rf"colou?r (is|of) the {_SHAPE}|which colou?r is the {_SHAPE}"),
    ("count", r"how many shapes|count the shapes|number of shapes"),
    ("which_shapes", r"(which|what|name the) shapes"),
    ("describe", r"describe|what is in this (picture|image)|what shape and colou?r"),
)
_COMPILED = tuple((kind, re.compile(pattern)) for kind, pattern in _RULES)
_LEADS = re.compile(r"^(looking at the image|listening to the clip),\s*")


def question_kind(question: str) -> str:
    """The kind of `question` (the last user turn's text), or `other`."""
    text = _LEADS.sub("", " ".join(question.lower().split()))
    for kind, pattern in _COMPILED:
        if pattern.search(text):
            return kind
    return OTHER
