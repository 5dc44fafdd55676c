"""Spoken facts of an answer, checkable against an audio clip: names (a capitalised word after "name is",
"called", "named", "this is", "call", or a known given name), weekdays and dates ("Thursday", "March 3", "the
5th"), times ("3 pm", "10:30", "noon"), and other numbers ("42")."""

from __future__ import annotations

import re

from grounding.checkable_claim import CheckableClaim
from grounding.claims import GIVEN_NAMES, WEEKDAYS

MONTHS = [
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
    rf"\b(?:(?:{'|'.join(MONTHS)})\s+\d{{1,2}}(?:st|nd|rd|th)?|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?"
    rf"(?:{'|'.join(MONTHS)})|(?:the\s+)?\d{{1,2}}(?:st|nd|rd|th))\b",
    re.I,
)
_NAME_CUE = re.compile(r"\b(?:name is|named|called|call|this is|ask for|from|with|to)\s+([A-Z][a-z]+)")


def spoken_claims(answer: str) -> list[CheckableClaim]:
    out: list[CheckableClaim] = []
    for match in _TIME.finditer(answer):
        out.append(CheckableClaim("time", match.group(0), match.group(0).lower()))
    for match in _DATE.finditer(answer):
        value = match.group(0)
        if value.lower().startswith("the ") or any(m.lower() in value.lower() for m in MONTHS):
            out.append(CheckableClaim("date", value, value.removeprefix("the ").removeprefix("The ")))
    for day in WEEKDAYS:
        if re.search(rf"\b{day}s?\b", answer, re.I):
            out.append(CheckableClaim("date", day, day))
    names = {m.group(1) for m in _NAME_CUE.finditer(answer) if m.group(1) not in (*WEEKDAYS, *MONTHS)}
    names |= {n for n in GIVEN_NAMES if re.search(rf"\b{n}\b", answer)}
    out += [CheckableClaim("name", n, n) for n in sorted(names)]
    for match in re.finditer(r"(?<![\d:])\b\d+(?:\.\d+)?\b(?![:\d])(?!\s?(?:am|pm|st|nd|rd|th)\b)", answer, re.I):
        out.append(CheckableClaim("number", match.group(0), match.group(0)))
    return out
