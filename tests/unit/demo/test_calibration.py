"""Choosing the label head's "nothing here" margin: the smallest one under which detections match the truth most."""

from __future__ import annotations

import torch

from demo.training.calibration import MARGINS, choose_margin, scene_facts
from demo.training.stage_losses import LABELS, label_of
from demo.world import COLOURS, SHAPES, WORLD_SHAPE_CELLS, Scene, Shape
from serving.encoders.detection import LabelHead


def _head() -> LabelHead:
    names = [f"{shape}:{colour}" for shape in SHAPES for colour in COLOURS]
    return LabelHead(torch.eye(LABELS), torch.zeros(LABELS), names, WORLD_SHAPE_CELLS)


def _tokens(shape_logit: float) -> torch.Tensor:
    """A 2 x 2 grid of merged tokens, as label logits: "nothing here" at 3 everywhere, and a red circle's token in
    the top-left cell at `shape_logit`."""
    tokens = torch.zeros(4, LABELS)
    tokens[:, 0] = 3.0
    tokens[0, label_of("circle", "red")] = shape_logit
    return tokens


def test_the_margin_is_the_smallest_that_finds_the_small_shape():
    scene = Scene(100, 100, (250, 250, 250), 0.0, 0, (Shape("circle", "red", "small", "left", 25, 25, 5),))
    truth = scene_facts(scene)
    assert truth == {"objects": ["circle"], "colours": {"circle": "red"}, "positions": {"circle": "left"}, "count": 1}
    calibration = choose_margin(_head(), [_tokens(2.0)], [(1, 4, 4)], [truth])
    assert calibration.margin == 1.5  # 3 - 1.5 < 2: the circle wins its cell; at 1.0 the tie goes to "nothing"
    assert calibration.agreement[0.0] == 0.0
    assert calibration.agreement[1.5] == 1.0
    assert calibration.agreement[max(MARGINS)] == 0.0  # every empty cell reads as a shape once nothing is cheap


def test_a_head_already_right_keeps_its_bias():
    scene = Scene(100, 100, (250, 250, 250), 0.0, 0, (Shape("circle", "red", "large", "left", 25, 25, 20),))
    calibration = choose_margin(_head(), [_tokens(5.0)], [(1, 4, 4)], [scene_facts(scene)])
    assert calibration.margin == 0.0
