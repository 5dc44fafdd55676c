"""The training recipe's pure parts: cell labels from a scene, LoRA merging, and fitting trained weights."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from grounding.training import LABELS, cell_labels, describe_label, label_of, prompt_text
from grounding.world import COLOURS, SHAPES, Scene, Shape
from serving.demo_models import apply_grounding, merge_lora


def _scene() -> Scene:
    shapes = (
        Shape("circle", "red", "large", "left", cx=50, cy=100, radius=45),
        Shape("star", "blue", "small", "right", cx=350, cy=100, radius=12),
    )
    return Scene(400, 200, (250, 250, 250), 0.0, 0, shapes)


def test_labels_name_every_shape_and_colour_once():
    seen = {label_of(s, c) for s in SHAPES for c in COLOURS}
    assert seen == set(range(1, LABELS))
    assert describe_label(label_of("star", "purple")) == ("star", "purple")
    assert describe_label(0) is None


def test_cells_under_a_shape_carry_its_label_and_the_rest_are_empty():
    cells = cell_labels(_scene(), rows=4, cols=8)  # 50 px cells
    assert cells[1, 0] == label_of("circle", "red")  # (25, 75) is 35 px from the centre: within 0.9 r
    assert cells[2, 7] == label_of("star", "blue")  # covers no cell's centre, but holds its own centre
    assert (cells == label_of("star", "blue")).sum() == 1
    assert cells[0, 3] == 0
    assert set(cells.reshape(-1).tolist()) <= {0, label_of("circle", "red"), label_of("star", "blue")}


def test_the_prompt_is_the_served_template_with_the_image_first():
    text = prompt_text("What colour is the star?", "Blue.")
    assert text.startswith("<|im_start|>system\n")
    assert "<|im_start|>user\n<|vision_start|><|IMAGE|><|vision_end|>What colour is the star?<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\nBlue.<|im_end|>")


def test_merging_lora_adds_the_scaled_low_rank_update():
    weight = torch.randn(6, 4)
    a, b = torch.randn(2, 4), torch.randn(6, 2)
    state = {"thinker.model.layers.3.self_attn.q_proj.weight": weight.clone()}
    merge_lora(state, {"lora.3.q_proj.a": a, "lora.3.q_proj.b": b}, scale=2.0)
    x = torch.randn(5, 4)
    merged = state["thinker.model.layers.3.self_attn.q_proj.weight"]
    assert torch.allclose(x @ merged.t(), x @ weight.t() + 2.0 * (x @ a.t() @ b.t()), atol=1e-5)
    with pytest.raises(RuntimeError, match="does not fit"):
        merge_lora(state, {"lora.9.q_proj.a": a, "lora.9.q_proj.b": b}, scale=1.0)


def test_trained_weights_must_fit_the_whole_tower(tmp_path):
    state = {"thinker.visual.w": torch.zeros(2, 2), "thinker.visual.b": torch.zeros(2)}
    partial = tmp_path / "partial.safetensors"
    save_file({"thinker.visual.w": torch.ones(2, 2)}, str(partial), metadata={"lora_scale": "2.0"})
    with pytest.raises(RuntimeError, match="does not fit"):
        apply_grounding(dict(state), partial)
    whole = tmp_path / "whole.safetensors"
    save_file(
        {"thinker.visual.w": torch.ones(2, 2), "thinker.visual.b": torch.ones(2)},
        str(whole),
        metadata={"lora_scale": "2.0"},
    )
    head, metadata = apply_grounding(state, whole)
    assert head == {}
    assert metadata == {"labels": "[]"}
    assert torch.equal(state["thinker.visual.b"], torch.ones(2))
