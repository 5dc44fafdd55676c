"""The label head's reading of a shape far bigger than any it was trained on: one shape, not a shape and its
fragments, where the head names how many tokens an ordinary shape covers."""

from __future__ import annotations

import torch

from serving.encoders.detection import BIG_SHAPE_CELLS_KEY, LABEL_HEAD_FILE, LabelHead

WORLD_SHAPE_CELLS = 4  # as the demo checkpoints' heads say: no shape of their world covers more

LABELS = ["circle:red", "star:red", "square:red", "triangle:blue"]
SYMBOLS = {".": 0, "C": 1, "S": 2, "Q": 3, "T": 4}


def _read(
    grid: str,
    sure: float = 0.9,
    glimpses: dict[tuple[int, int], tuple[int, float]] | None = None,
    big_shape_cells: int | None = WORLD_SHAPE_CELLS,
):
    """The findings of a head that gives each token's drawn label `sure` of its probability (the rest spread
    evenly), and the glimpsed label at each glimpsed (row, col) the given probability."""
    rows = [line.split() for line in grid.strip().splitlines()]
    n = len(LABELS) + 1
    probs = torch.full((len(rows) * len(rows[0]), n), (1 - sure) / (n - 1))
    for r, line in enumerate(rows):
        for c, symbol in enumerate(line):
            probs[r * len(line) + c, SYMBOLS[symbol]] = sure
    for (r, c), (label, p) in (glimpses or {}).items():
        token = probs[r * len(rows[0]) + c]
        token.fill_(1e-6)
        token[label] = p
        token[0] = 1 - p - (n - 2) * 1e-6
    head = LabelHead(torch.eye(n), torch.zeros(n), LABELS, big_shape_cells)
    return head.findings(torch.log(probs), (1, 2 * len(rows), 2 * len(rows[0])), merge_size=2)


def _labels(findings) -> dict[str, int]:
    return {d.label: d.cells for d in findings.detections}


BIG_CIRCLE = """
. . . . . . .
. . C C C . .
. C C C S . .
. C S C C . .
. . C C C . .
. . . . . . .
"""


def test_fragments_of_another_kind_inside_a_big_shape_are_the_shape():
    findings = _read(BIG_CIRCLE)
    assert _labels(findings) == {"circle:red": 14}
    (circle,) = findings.detections
    assert (circle.row, round(circle.col, 3)) == (0.5, 0.459)
    # the star read on two of the circle's tokens is the circle's own uncertainty, not a glimpse of a star
    assert findings.peaks["star"] < 0.1


def test_a_glimpse_away_from_the_big_shape_still_counts():
    findings = _read(BIG_CIRCLE, glimpses={(5, 6): (2, 0.3)})  # bottom-right corner, nowhere near the circle
    assert abs(findings.peaks["star"] - 0.3) < 1e-4


def test_neighbours_of_the_world_s_sizes_stay_apart():
    # a square as big as the world draws one (four tokens) touching a one-token circle of the same colour: two
    # shapes, as drawn
    findings = _read("""
. . . . .
. Q Q C .
. Q Q . .
. . . . .
""")
    assert _labels(findings) == {"square:red": 4, "circle:red": 1}
    assert findings.peaks["circle"] == 0.9


def test_a_big_shape_keeps_apart_another_kind_holding_a_third_of_its_region():
    findings = _read("""
. . . . . . .
. C C C S S .
. C C S S . .
. . . . . . .
""")
    assert _labels(findings) == {"circle:red": 5, "star:red": 4}


def test_a_big_shape_does_not_take_tokens_of_another_colour():
    findings = _read("""
. . . . . .
. C C C T .
. C C C . .
. . . . . .
""")
    assert _labels(findings) == {"circle:red": 6, "triangle:blue": 1}
    assert findings.peaks["triangle"] == 0.9


def test_a_head_that_names_no_shape_size_reads_every_label_as_drawn():
    findings = _read(BIG_CIRCLE, big_shape_cells=None)
    assert _labels(findings) == {"circle:red": 12, "star:red": 2}


def test_the_shape_size_travels_in_the_head_file(tmp_path):
    from safetensors.torch import save_file

    n = len(LABELS) + 1
    (tmp_path / LABEL_HEAD_FILE).parent.mkdir()
    tensors = {"weight": torch.eye(n), "bias": torch.zeros(n)}
    metadata = {"labels": '["circle:red", "star:red", "square:red", "triangle:blue"]', BIG_SHAPE_CELLS_KEY: "4"}
    save_file(tensors, str(tmp_path / LABEL_HEAD_FILE), metadata=metadata)
    assert LabelHead.load(tmp_path).big_shape_cells == 4
    save_file(tensors, str(tmp_path / LABEL_HEAD_FILE), metadata={"labels": metadata["labels"]})
    assert LabelHead.load(tmp_path).big_shape_cells is None
