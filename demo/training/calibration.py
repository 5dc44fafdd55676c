"""Calibrating the label head's "nothing here" label, so its detections name small shapes too.

The label head is trained on every merged image token, and most tokens show nothing: its "nothing here" logit
learns a prior that wins over a small shape's single token. The grounding scorer reads the detections as the
image's content, so a missed shape turns every right answer about it into an unsupported claim. After training,
the head's "nothing here" bias is lowered by the margin that makes its detections agree with the truth (the same
shapes, colours and positions the scorer reads, by `grounding.image_evidence.findings_facts`) on the most scenes,
over scenes drawn from a seed of their own (never a golden set's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from demo.world import Scene, render_scene, sample_scene
from grounding.image_evidence import findings_facts
from serving.encoders.detection import LabelHead

MARGINS = tuple(m / 2 for m in range(17))  # 0 to 8 nats, in halves
CALIBRATION_SEED = 7


@dataclass(frozen=True)
class Calibration:
    margin: float  # subtracted from the "nothing here" bias
    agreement: dict[float, float]  # share of scenes whose detections match the truth, by margin tried


def scene_facts(scene: Scene) -> dict[str, Any]:
    """What the scorer should read off a perfect detector: the scene's shapes, colours, positions and count."""
    return {
        "objects": sorted(s.kind for s in scene.shapes),
        "colours": {s.kind: s.colour for s in scene.shapes},
        "positions": {s.kind: s.position for s in scene.shapes},
        "count": len(scene.shapes),
    }


def choose_margin(
    head: LabelHead, tokens: Sequence[Any], grids: Sequence[tuple[int, int, int]], truths: Sequence[dict[str, Any]]
) -> Calibration:
    """The margin in MARGINS under which `head`'s detections over each image's merged `tokens` match `truths` most
    often (the smallest such margin on a tie)."""
    agreement: dict[float, float] = {}
    for margin in MARGINS:
        bias = head.bias.clone()
        bias[0] -= margin
        shifted = LabelHead(head.weight, bias, head.labels, head.big_shape_cells)
        cases = zip(tokens, grids, truths, strict=True)
        hits = sum(findings_facts((shifted.findings(t, g),)) == truth for t, g, truth in cases)
        agreement[margin] = hits / max(1, len(truths))
    best = max(MARGINS, key=lambda m: (agreement[m], -m))
    return Calibration(best, agreement)


def calibrate(thinker: Any, processor: Any, head: LabelHead, scenes: int = 200) -> Calibration:
    """Runs the vision tower over `scenes` fresh scenes and chooses the margin for `head`."""
    import torch

    rng = np.random.default_rng(CALIBRATION_SEED)
    drawn = [sample_scene(rng) for _ in range(scenes)]
    tokens: list[Any] = []
    grids: list[tuple[int, int, int]] = []
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        for scene in drawn:
            enc = processor.image_processor(images=[render_scene(scene)], return_tensors="pt")
            tokens.append(thinker.visual(enc["pixel_values"], grid_thw=enc["image_grid_thw"]).pooler_output)
            t, h, w = (int(v) for v in enc["image_grid_thw"][0].tolist())
            grids.append((t, h, w))
    return choose_margin(head, tokens, grids, [scene_facts(s) for s in drawn])


def recalibrate(weights: Path, checkpoint: Path, scenes: int = 200) -> Calibration:
    """Calibrates the label head stored in exported `weights` (a `<pool>-grounding.safetensors`) in place, reading
    images with the vision tower of `checkpoint` (the demo checkpoint `build-demo` made from those weights). The
    margin found is added to the one the manifest beside the weights records."""
    import hashlib
    import json

    from safetensors.torch import load_file, save_file

    from demo.training.thinker import load_thinker

    thinker, processor = load_thinker(checkpoint)
    head = LabelHead.load(checkpoint)
    if head is None:
        raise RuntimeError(f"{checkpoint} has no label head: build it from {weights} first")
    calibration = calibrate(thinker, processor, head, scenes)
    tensors = load_file(str(weights))
    if not _same(tensors["label_head.bias"], head.bias):
        raise RuntimeError(f"{checkpoint} was not built from {weights}: rebuild it first")
    tensors["label_head.bias"] = tensors["label_head.bias"].clone()
    tensors["label_head.bias"][0] -= calibration.margin
    save_file(tensors, str(weights), metadata=_metadata(weights))
    manifest_path = weights.with_suffix(".json")
    manifest = json.loads(manifest_path.read_text())
    before = float(manifest.get("label_head_calibration", {}).get("margin", 0.0))
    manifest["weights_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    manifest["label_head_calibration"] = {
        "margin": before + calibration.margin,
        "scenes agreeing, by margin": {str(m): round(v, 4) for m, v in calibration.agreement.items()},
    }
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return calibration


def _same(a: Any, b: Any) -> bool:
    import torch

    return bool(torch.equal(a.float(), b.float()))


def _metadata(path: Path) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})
