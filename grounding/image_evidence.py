"""Checking an answer's claims about images against what the vision tower detected (serving.encoders.detection).

The detections become facts of the synthetic world: which shapes are there, each one's colour and position
(from the centroid of its tokens: within 17% of the middle on both axes is the centre, otherwise the side of the
axis it is furthest along), and how many. Size is not judged: at the served resolution a shape covers one to a
few tokens whatever its size. Claims come from `demo.answers.extract_claims`, and each is supported or not:
- an object: a detected shape; anything else (a woman, a tree) is unsupported;
- a colour bound to a shape: that shape was detected in that colour; an unbound colour: some shape has it, except
  in answer to what colour a shape is, where every colour named is that shape's;
- a position bound to a shape: that shape's position;
- a count of shapes: the number of shapes detected;
- a yes or no to "is there a <colour> <shape>": whether that shape was detected in that colour;
- to a question asking for every shape (which shapes are there, describe the image), each detected shape the answer
  leaves out is a claim the detections contradict ("leaves out the square"): an answer listing two of three shapes
  says, wrongly, that those are all there is.
An answer that asserts nothing checkable (a bare "Yes.") has no claims: nothing in it is unsupported.

Where the label head is unsure (serving.encoders.detection's `share` and `peak`), a claim resting on the unsure part is
not supported, since the tower that answered may share the head's mistake:
- a shape whose chosen colour holds less than `SURE_SHARE` of the shape's probability (split between colours)
  supports no claim of its colour, and no "yes" to whether it is there in that colour;
- a shape not detected but glimpsed (some token gives it at least `GLIMPSE_PEAK`) may be there: a list of every
  shape that leaves it out, a count that does not include it, and a "no" to whether it is there go unsupported.
Both thresholds were chosen on a calibration set of the demo world (docs/grounding.md).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from grounding.claims import SHAPE_NOUNS, article, extract_claims
from grounding.questions import question_kind
from serving.encoders.detection import ImageFindings

CENTRE_BAND = 0.17  # half-width of the centre, as a fraction of each side
SURE_SHARE = 0.6  # a shape's colour is read only when it holds this much of the shape's probability
GLIMPSE_PEAK = 0.2  # a shape not detected may still be there when one token gives it this much
EVERY_SHAPE = frozenset({"which_shapes", "describe"})  # question kinds whose answer must name every shape


def position_of(row: float, col: float) -> str:
    dy, dx = row - 0.5, col - 0.5
    if abs(dx) < CENTRE_BAND and abs(dy) < CENTRE_BAND:
        return "centre"
    if abs(dx) >= abs(dy):
        return "left" if dx < 0 else "right"
    return "top" if dy < 0 else "bottom"


def findings_facts(findings: tuple[ImageFindings, ...]) -> dict[str, Any]:
    """The world facts the detections show, over every image of the request. A shape seen in two colours (a
    label head unsure of a few tokens) keeps the colour covering more tokens."""
    best: dict[str, tuple[int, str, str]] = {}
    for image in findings:
        for d in image.detections:
            shape, _, colour = d.label.partition(":")
            if d.cells > best.get(shape, (0, "", ""))[0]:
                best[shape] = (d.cells, colour, position_of(d.row, d.col))
    return {
        "objects": sorted(best),
        "colours": {shape: colour for shape, (_, colour, _) in best.items()},
        "positions": {shape: position for shape, (_, _, position) in best.items()},
        "count": len(best),
    }


@dataclass(frozen=True)
class Doubts:
    unsure: frozenset[str]  # detected shapes whose colour the head splits (best share under SURE_SHARE)
    glimpsed: tuple[str, ...]  # shapes not detected in any image that some token still gives GLIMPSE_PEAK
    seen_colours: dict[str, frozenset[str]]  # every colour each shape was detected in


def findings_doubts(findings: tuple[ImageFindings, ...]) -> Doubts:
    """Where the detections of the request's images are unsure (see the module's notes)."""
    share: dict[str, float] = {}
    seen: dict[str, set[str]] = {}
    peaks: dict[str, float] = {}
    for image in findings:
        for d in image.detections:
            shape, _, colour = d.label.partition(":")
            share[shape] = max(share.get(shape, 0.0), d.share)
            seen.setdefault(shape, set()).add(colour)
        for kind, peak in image.peaks.items():
            peaks[kind] = max(peaks.get(kind, 0.0), peak)
    glimpsed = tuple(sorted(k for k, p in peaks.items() if p >= GLIMPSE_PEAK and k not in seen))
    return Doubts(
        frozenset(s for s, v in share.items() if v < SURE_SHARE),
        glimpsed,
        {s: frozenset(c) for s, c in seen.items()},
    )


@dataclass(frozen=True)
class ImageCheck:
    claims: int
    unsupported: tuple[str, ...]

    @property
    def supported(self) -> int:
        return self.claims - len(self.unsupported)


Verdict = tuple[str, bool, tuple[str, str | None, str]]  # (claim worded for people, supported, key)


def image_claim_verdicts(answer: str, findings: tuple[ImageFindings, ...], question: str = "") -> list[Verdict]:
    """Each checkable claim of `answer` about the images, whether the detections support it, and a key that an
    audio claim of the same fact shares (an unbound colour or number), so that with both media either may
    support it. A yes or no to a question asking whether a coloured shape is there is checked too."""
    facts = findings_facts(findings)
    doubts = findings_doubts(findings)
    claims = extract_claims(answer)
    colours, positions = facts["colours"], facts["positions"]
    verdicts: list[Verdict] = []
    for obj in sorted(claims.objects):
        verdicts.append((f"a {obj}", obj in facts["objects"], ("object", obj, "")))
    for noun, colour in _bind_to_asked(claims.colours, question):
        if noun is None:
            verdicts.append((f"something {colour}", colour in colours.values(), ("colour", None, colour)))
        elif noun in SHAPE_NOUNS:
            sure = colours.get(noun) == colour and noun not in doubts.unsure
            verdicts.append((f"the {noun} is {colour}", sure, ("colour", noun, colour)))
    for noun, position in claims.positions:
        if noun in SHAPE_NOUNS:
            verdicts.append(
                (f"the {noun} is at {position}", positions.get(noun) == position, ("position", noun, position))
            )
    maybe = "".join(f" (a {shape} may be there too)" for shape in doubts.glimpsed)
    for noun, value in claims.numbers:
        if noun in (None, "shape"):
            counted = value == facts["count"] and not doubts.glimpsed
            shapes = "shape" if value == 1 else "shapes"
            verdicts.append((f"{value} {shapes}{maybe}", counted, ("number", noun, str(value))))
    if claims.yes_no is not None and question_kind(question) == "exists":
        asked = [(n, c) for n, c in extract_claims(question).colours if n in SHAPE_NOUNS]
        if asked:
            shape, colour = asked[0]
            if claims.yes_no == "yes":
                ok = colours.get(shape) == colour and shape not in doubts.unsure
            else:
                ok = colour not in doubts.seen_colours.get(shape, ()) and shape not in doubts.glimpsed
            asks = f"is there {article(colour)} {colour} {shape}"
            verdicts.append((f"{claims.yes_no}: {asks}", ok, ("exists", shape, colour)))
    return verdicts + _left_out(claims.objects, facts["objects"], doubts.glimpsed, question)


def _bind_to_asked(colours: list[tuple[str | None, str]], question: str) -> list[tuple[str | None, str]]:
    """To "what colour is the <shape>", every colour the answer names is said of that shape, bound or not ("The
    circle is red, blue and green" gives the circle three colours, not one and two loose ones)."""
    if question_kind(question) != "colour_of":
        return colours
    asked = sorted(extract_claims(question).objects & SHAPE_NOUNS)
    if len(asked) != 1:
        return colours
    return [(asked[0] if noun is None else noun, colour) for noun, colour in colours]


def _left_out(named: Collection[str], detected: list[str], glimpsed: Collection[str], question: str) -> list[Verdict]:
    """To a question asking for every shape, each detected or glimpsed shape the answer does not name."""
    if question_kind(question) not in EVERY_SHAPE:
        return []
    out: list[Verdict] = [
        (f"leaves out the {shape}", False, ("object", shape, "left out")) for shape in detected if shape not in named
    ]
    return out + [
        (f"may leave out the {shape}", False, ("object", shape, "left out")) for shape in glimpsed if shape not in named
    ]


def check_image_claims(answer: str, findings: tuple[ImageFindings, ...], question: str = "") -> ImageCheck:
    verdicts = image_claim_verdicts(answer, findings, question)
    return ImageCheck(len(verdicts), tuple(claim for claim, ok, _ in verdicts if not ok))
