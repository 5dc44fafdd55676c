"""What a trained vision tower sees: its label head read over an image's merged tokens.

A checkpoint whose tower was trained for grounding (`tessera models train-demo`) carries
`grounding/label_head.safetensors`: a linear map from each merged image token to labels, label 0 meaning
"nothing here" and the rest named in the file's metadata (`{"labels": [...]}`, e.g. "circle:red"). Applied to
the embeddings the encoder pool already produced (fresh or from the embedding cache), it costs one small matrix
product per image. Tokens are grouped by label: each label seen becomes a `Detection` with the number of tokens
it covers and their centroid, in the image's own coordinates (0 at the top or left, 1 at the bottom or right).
This is the evidence the grounding scorer checks an answer's claims about an image against.

A shape drawn far bigger than the things the head was trained on (a circle filling the frame) covers many tokens,
which look alike inside it: the head reads a few of them as another kind in the same colour (two cells on the rim
of a big red circle as a red star). Where the head's metadata names `big_shape_cells` (the most tokens one
ordinary thing covers at the served resolution), tokens are first grouped into connected regions of one colour
(touching at a side or a corner). In a region where one label holds more than that many tokens, tokens of another
kind holding fewer than a third of the region's are fragments of the big shape and take its label; neighbours of
ordinary size in the same colour are left apart. Such a big shape's tokens and rim (the tokens touching it that
show nothing) are its own, so they count to no other kind's `peak` below. An image where no label holds more than
`big_shape_cells` tokens skips the grouping.

How sure the head is rides along, read from its probabilities (softmax over each token's labels). A label names a
kind of thing and an attribute ("circle:red": kind "circle"):
- each detection's `share`: over every token showing its kind, the part of the kind's probability its label
  holds (a square the head splits between blue and yellow tokens gives each colour about half);
- each kind's `peak`: its highest probability (all its labels together) on any one token, detected or not, so a
  thing the head glimpsed but ranked below "nothing here" everywhere is not taken for certainly absent; a big
  shape's tokens and rim count only to its own kind's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FRAGMENT_SHARE = 1 / 3  # another kind in a big shape's region is a fragment of it below this part of the region

# In a folder of its own: vLLM loads every *.safetensors file at the top of a checkpoint as model weights.
LABEL_HEAD_FILE = "grounding/label_head.safetensors"
# The head's metadata key for the most tokens one ordinary thing covers (see the module's notes); absent: no
# region is read as one big shape.
BIG_SHAPE_CELLS_KEY = "big_shape_cells"


@dataclass(frozen=True)
class Detection:
    label: str
    cells: int  # merged tokens showing it
    row: float  # centroid, 0 (top) to 1 (bottom)
    col: float  # centroid, 0 (left) to 1 (right)
    share: float = 1.0  # the label's part of its kind's probability over the tokens showing that kind


def kind_of(label: str) -> str:
    """The kind a label names: "circle" for "circle:red"; a label without an attribute is its own kind."""
    return label.partition(":")[0]


@dataclass(frozen=True)
class ImageFindings:
    rows: int  # merged-token grid of the image
    cols: int
    detections: tuple[Detection, ...]
    peaks: dict[str, float] = field(default_factory=dict)  # each kind's highest probability on one token


class LabelHead:
    def __init__(self, weight: Any, bias: Any, labels: list[str], big_shape_cells: int | None = None) -> None:
        if weight.shape[0] != len(labels) + 1 or bias.shape != (weight.shape[0],):
            raise ValueError(f"a label head of {weight.shape[0]} outputs cannot name {len(labels)} labels plus none")
        if big_shape_cells is not None and big_shape_cells < 1:
            raise ValueError(f"big_shape_cells must be 1 or more, got {big_shape_cells}")
        self.weight = weight
        self.bias = bias
        self.labels = labels
        self.big_shape_cells = big_shape_cells

    @classmethod
    def load(cls, checkpoint: Path) -> LabelHead | None:
        """The checkpoint's label head, or None when its tower was not trained for grounding."""
        path = checkpoint / LABEL_HEAD_FILE
        if not path.is_file():
            return None
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            labels = json.loads(metadata["labels"])
            big = int(metadata[BIG_SHAPE_CELLS_KEY]) if BIG_SHAPE_CELLS_KEY in metadata else None
            return cls(f.get_tensor("weight"), f.get_tensor("bias"), list(labels), big)

    def findings(self, embeds: Any, grid_thw: tuple[int, int, int], merge_size: int = 2) -> ImageFindings:
        """The labels over one image's merged tokens ([tokens, hidden], in raster order of the merged grid)."""
        import torch

        _, h, w = grid_thw
        rows, cols = h // merge_size, w // merge_size
        with torch.inference_mode():
            probs = torch.softmax(embeds.float() @ self.weight.t().float() + self.bias.float(), -1)
            predicted = probs.argmax(-1).reshape(-1)
        if predicted.numel() != rows * cols:
            raise ValueError(f"{predicted.numel()} tokens do not form a {rows}x{cols} grid")
        probs = probs.reshape(rows * cols, -1)
        kinds: dict[str, list[int]] = {}
        for index, label in enumerate(self.labels, start=1):
            kinds.setdefault(kind_of(label), []).append(index)
        owner: list[str | None] = []
        big = self.big_shape_cells
        if big is not None and int(torch.bincount(predicted, minlength=len(self.labels) + 1)[1:].max()) > big:
            merged, owner = self._merge_fragments(predicted.tolist(), rows, cols, big)
            predicted = torch.tensor(merged)
        kind_mass = {kind: probs[:, columns].sum(-1) for kind, columns in kinds.items()}
        detections = []
        for label in sorted(set(predicted.tolist()) - {0}):
            where = (predicted == label).nonzero().reshape(-1)
            r = (where // cols).float() + 0.5
            c = (where % cols).float() + 0.5
            kind = kind_of(self.labels[label - 1])
            showing = torch.isin(predicted, torch.tensor(kinds[kind]))
            share = float(probs[showing, label].sum() / kind_mass[kind][showing].sum().clamp_min(1e-12))
            detections.append(
                Detection(
                    self.labels[label - 1],
                    int(where.numel()),
                    float(r.mean()) / rows,
                    float(c.mean()) / cols,
                    round(share, 4),
                )
            )
        peaks = {}
        for kind, mass in kind_mass.items():
            # a big shape's tokens and rim count to its own kind's peak alone
            seen = mass[torch.tensor([big is None or big == kind for big in owner])] if owner else mass
            peaks[kind] = round(float(seen.max()), 4) if seen.numel() else 0.0
        return ImageFindings(rows, cols, tuple(detections), peaks)

    def _merge_fragments(
        self, labels: list[int], rows: int, cols: int, big_shape_cells: int
    ) -> tuple[list[int], list[str | None]]:
        """Each token's label once the fragments of each big shape (see the module's notes) take the shape's, and
        the kind of the big shape whose token or rim each token is (None for the rest)."""
        merged = list(labels)
        colour = [self.labels[label - 1].partition(":")[2] if label else None for label in labels]
        owner: list[str | None] = [None] * len(labels)
        for region in _regions(colour, rows, cols):
            counts: dict[int, int] = {}
            for token in region:
                counts[labels[token]] = counts.get(labels[token], 0) + 1
            label, cells = max(counts.items(), key=lambda item: (item[1], -item[0]))
            if cells <= big_shape_cells:
                continue
            kind = kind_of(self.labels[label - 1])
            for token in region:
                other = labels[token]
                if kind_of(self.labels[other - 1]) != kind and counts[other] < FRAGMENT_SHARE * len(region):
                    merged[token] = label
                if merged[token] == label:
                    owner[token] = kind
                    for near in _neighbours(token, rows, cols):
                        if not labels[near]:
                            owner[near] = kind
        return merged, owner


def _neighbours(token: int, rows: int, cols: int) -> list[int]:
    """The tokens touching `token` at a side or a corner in a `rows` x `cols` raster grid."""
    r, c = divmod(token, cols)
    return [
        rr * cols + cc
        for rr in range(max(0, r - 1), min(rows, r + 2))
        for cc in range(max(0, c - 1), min(cols, c + 2))
        if (rr, cc) != (r, c)
    ]


def _regions(colour: list[str | None], rows: int, cols: int) -> list[list[int]]:
    """The connected regions (touching at a side or a corner) of tokens of one colour; None is no colour."""
    region_of: dict[int, int] = {}
    regions: list[list[int]] = []
    for start, shade in enumerate(colour):
        if shade is None or start in region_of:
            continue
        region_of[start] = len(regions)
        stack, region = [start], []
        while stack:
            token = stack.pop()
            region.append(token)
            for near in _neighbours(token, rows, cols):
                if near not in region_of and colour[near] == shade:
                    region_of[near] = len(regions)
                    stack.append(near)
        regions.append(region)
    return regions
