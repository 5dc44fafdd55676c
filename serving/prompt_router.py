"""The fitted model behind the `router` routing policy: how likely the weakest pool is to answer a request right,
from what the request shows before anything answers it.

Features, all read from the request itself:
- its slice: the media it carries (text, image, audio, image+audio);
- its words and word pairs, hashed into `buckets` slots: a prompt classifier small enough to fit on a few hundred
  items, so that "spell it backwards" and "how many shapes" can weigh differently;
- the prompt's size (log fused tokens) and the heuristic's word (serving.routing `text_is_complex` and the long
  prompt rule).

A logistic model over them gives P(the weak answer is right); a request goes to the weakest able pool when that
reaches `threshold`, else to the strongest.

The same file may carry the `cascade` policy's fitted gate (`CascadeGate`): the evidence and threshold its first
attempt is checked with, and whether text is placed by the router or the heuristic, so that what `cascade` serves
is what the eval measured rather than each tenant's own guardrail threshold.

`tessera eval routing --router-out PATH` fits the weights on its train split, chooses the thresholds on its dev
split (never on test) and writes the JSON `load_router` reads; the server reads it from beside the demo
checkpoints (`router.json` in the models directory) or from `TESSERA_ROUTER_PATH`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SLICES = ("text", "image", "audio", "image+audio")
EVIDENCES = ("label_head", "judge", "both")
TEXT_PLACERS = ("heuristic", "router")
FORMAT = "tessera-router/1"
DEFAULT_BUCKETS = 64
_WORD = re.compile(r"[a-z0-9']+")


def slice_of(modalities: Iterable[str]) -> str:
    """The slice a request's modalities fall in."""
    present = set(modalities)
    image, audio = "image" in present, "audio" in present
    if image and audio:
        return "image+audio"
    return "image" if image else "audio" if audio else "text"


def _hashed(text: str, buckets: int) -> list[float]:
    """Which of `buckets` slots the text's words and adjacent word pairs land in (crc32: the same in every
    process, unlike Python's own string hash)."""
    words = _WORD.findall(text.lower())
    slots = [0.0] * buckets
    for token in [*words, *(f"{a} {b}" for a, b in itertools.pairwise(words))]:
        slots[zlib.crc32(token.encode()) % buckets] = 1.0
    return slots


def router_features(
    slice_name: str, text: str, fused_tokens: int, heuristic_strong: bool, buckets: int = DEFAULT_BUCKETS
) -> list[float]:
    """The feature row of one request: slice one-hot, hashed words, log size, the heuristic's word, a bias."""
    if slice_name not in SLICES:
        raise ValueError(f"unknown slice {slice_name!r}; one of {', '.join(SLICES)}")
    one_hot = [float(slice_name == s) for s in SLICES]
    return [*one_hot, *_hashed(text, buckets), math.log1p(max(0, fused_tokens)) / 10, float(heuristic_strong), 1.0]


def feature_count(buckets: int) -> int:
    return len(SLICES) + buckets + 3


@dataclass(frozen=True)
class CascadeGate:
    """What a cascade's first attempt is checked with: a grounding evidence and the score it must reach, and what
    places text (which has no grounding to check): `heuristic` or `router`."""

    evidence: str
    threshold: float
    text: str = "heuristic"

    def __post_init__(self) -> None:
        if self.evidence not in EVIDENCES:
            raise ValueError(f"a cascade's evidence is one of {', '.join(EVIDENCES)}, not {self.evidence!r}")
        if self.text not in TEXT_PLACERS:
            raise ValueError(f"a cascade places text by {' or '.join(TEXT_PLACERS)}, not {self.text!r}")
        if not 0.0 <= self.threshold <= 1.01:
            raise ValueError(f"a cascade's threshold is a score in [0, 1], not {self.threshold}")


@dataclass(frozen=True)
class PromptRouter:
    weights: tuple[float, ...]
    threshold: float
    buckets: int = DEFAULT_BUCKETS
    # where the weights came from (items per split, the pools compared, the cost ratio): shown, never read
    fitted: dict[str, Any] = field(default_factory=dict)
    cascade: CascadeGate | None = None

    def __post_init__(self) -> None:
        if len(self.weights) != feature_count(self.buckets):
            raise ValueError(
                f"a router over {self.buckets} buckets has {feature_count(self.buckets)} weights, "
                f"not {len(self.weights)}"
            )
        if not 0.0 <= self.threshold <= 1.01:
            raise ValueError(f"a router's threshold is a probability, not {self.threshold}")

    def p_weak_right(self, slice_name: str, text: str, fused_tokens: int, heuristic_strong: bool) -> float:
        row = router_features(slice_name, text, fused_tokens, heuristic_strong, self.buckets)
        z = sum(w * x for w, x in zip(self.weights, row, strict=True))
        return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "slices": list(SLICES),
            "buckets": self.buckets,
            "threshold": self.threshold,
            "weights": list(self.weights),
            "fitted": self.fitted,
            "cascade": dataclasses.asdict(self.cascade) if self.cascade is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PromptRouter:
        if data.get("format") != FORMAT:
            raise ValueError(f"not a router file of format {FORMAT} (format {data.get('format')!r})")
        if list(data.get("slices", [])) != list(SLICES):
            raise ValueError(f"the router was fitted over slices {data.get('slices')}, not {list(SLICES)}")
        gate = data.get("cascade")
        return cls(
            weights=tuple(float(w) for w in data["weights"]),
            threshold=float(data["threshold"]),
            buckets=int(data["buckets"]),
            fitted=dict(data.get("fitted") or {}),
            cascade=CascadeGate(str(gate["evidence"]), float(gate["threshold"]), str(gate["text"])) if gate else None,
        )


def load_router(path: Path) -> PromptRouter:
    """The router stored at `path`; a file that is not one is an error that names it."""
    try:
        return PromptRouter.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"cannot read the router at {path}: {exc}") from exc


def save_router(router: PromptRouter, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(router.to_json(), indent=1) + "\n")
    tmp.replace(path)
