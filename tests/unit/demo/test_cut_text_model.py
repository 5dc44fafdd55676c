"""A pool whose text model is cut from SmolLM2's (`small`): which layers it keeps, the text stage that re-fits the
cut to the whole model, and the text model it exports and `build-demo` lays back over the cut."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from demo.checkpoints import DEMO_SPECS, TRAINED_SPECS, spec_of
from demo.grounded_weights import apply_grounding, apply_text
from demo.sources import transplant_text
from demo.training.config import ORDER, STAGES, TrainConfig
from demo.training.curriculum import mix_turns
from demo.training.distil import distil_loss


def test_the_stages_run_text_before_joint_and_keep_their_random_streams():
    # a stage's place in STAGES seeds its draws: the joint stage's must not move for the large pool's recipe
    assert STAGES[:3] == ("vision", "audio", "joint")
    assert ORDER == ("vision", "audio", "text", "joint")
    config = TrainConfig(vision_steps=2, audio_steps=3, text_steps=4, steps=5)
    assert [config.stage(step) for step in range(14)] == ["vision"] * 2 + ["audio"] * 3 + ["text"] * 4 + ["joint"] * 5
    assert config.stage_span("text") == (5, 4)
    assert config.stage_span("joint") == (9, 5)
    assert config.total_steps == 14
    # no text stage: the steps fall where they always did
    plain = TrainConfig(vision_steps=2, audio_steps=3, steps=5)
    assert [plain.stage(step) for step in range(10)] == ["vision"] * 2 + ["audio"] * 3 + ["joint"] * 5


def test_the_small_pool_trains_its_cut_text_model_whole_and_never_its_borrowed_towers(stand_in_trainer):
    small = TrainConfig.for_pool("small")
    assert (small.vision_steps, small.audio_steps) == (0, 0)
    assert small.text_steps > 0
    assert small.joint_distil > 0  # the joint stage keeps distilling, so the layers keep their language
    assert TrainConfig().joint_distil == 0  # large's recipe is unchanged
    assert small.more_text
    assert not TrainConfig().more_text
    assert small.joint_mix == mix_turns({"image": 4, "audio": 2, "image+audio": 2})
    assert small.text_full
    assert not small.joint_merger
    assert TrainConfig.for_pool("large") == TrainConfig(pool="large")
    trainer = stand_in_trainer(0, text_full=True, joint_merger=False)
    layer = torch.nn.Linear(4, 4)
    trainer.thinker.model = torch.nn.Module()
    trainer.thinker.model.layers = torch.nn.ModuleList([layer])
    trainer.thinker.model.norm = torch.nn.LayerNorm(4)
    trainer.thinker.model.embed_tokens = torch.nn.Embedding(8, 4)
    assert sorted(trainer.text_trainable()) == [
        "thinker.model.layers.0.bias",
        "thinker.model.layers.0.weight",
        "thinker.model.norm.bias",
        "thinker.model.norm.weight",
    ]
    for stage in ("text", "joint"):
        trained = {id(p) for p in trainer._stage_parameters(stage)}
        assert id(layer.weight) in trained
        assert id(trainer.thinker.model.embed_tokens.weight) not in trained
        assert not any(id(p) in trained for p in trainer.thinker.visual.parameters())
        assert not any(id(p) in trained for p in trainer.thinker.audio_tower.parameters())


def test_the_cut_keeps_only_the_named_layers_in_their_new_places():
    source = {
        "model.embed_tokens.weight": torch.randn(5, 2),
        "model.norm.weight": torch.randn(2),
        **{f"model.layers.{i}.mlp.up_proj.weight": torch.full((2, 2), float(i)) for i in range(6)},
    }
    target = {
        "model.embed_tokens.weight": torch.zeros(7, 2),
        "lm_head.weight": torch.zeros(7, 2),
        "model.norm.weight": torch.zeros(2),
        **{f"model.layers.{j}.mlp.up_proj.weight": torch.zeros(2, 2) for j in range(2)},
    }
    transplant_text(SimpleNamespace(state_dict=lambda: target), source, layers=(1, 4))
    assert target["model.layers.0.mlp.up_proj.weight"].unique().tolist() == [1.0]
    assert target["model.layers.1.mlp.up_proj.weight"].unique().tolist() == [4.0]
    assert torch.equal(target["lm_head.weight"][:5], source["model.embed_tokens.weight"])
    spec = TRAINED_SPECS["small"]
    assert spec_of("small", training=True) == spec
    assert len(spec.text_layers_kept) == spec.text_layers
    assert spec.towers_from == "large"
    assert spec.text_hidden == DEMO_SPECS["large"].text_hidden


def test_the_exported_text_model_replaces_the_cut_layers_and_must_fit(tmp_path):
    state = {"thinker.model.layers.0.w": torch.zeros(2, 3), "thinker.visual.w": torch.zeros(2)}
    weights = tmp_path / "small-grounding.safetensors"
    save_file({"thinker.model.layers.0.w": torch.full((2, 3), 0.5, dtype=torch.float16)}, str(weights))
    apply_text(state, weights)
    assert state["thinker.model.layers.0.w"].dtype == torch.float32
    assert state["thinker.model.layers.0.w"].unique().tolist() == [0.5]
    wrong = tmp_path / "wrong.safetensors"
    save_file({"thinker.model.layers.0.w": torch.zeros(3, 3, dtype=torch.float16)}, str(wrong))
    with pytest.raises(RuntimeError, match="does not fit this checkpoint's text model"):
        apply_text(state, wrong)
    towers_only = tmp_path / "towers.safetensors"
    save_file({"thinker.visual.w": torch.ones(2)}, str(towers_only))
    with pytest.raises(RuntimeError, match="no text weights"):
        apply_text(state, towers_only)


def test_borrowed_towers_leave_their_pools_adapter_out(tmp_path):
    state = {"thinker.visual.w": torch.zeros(2), "thinker.model.layers.0.self_attn.q_proj.weight": torch.zeros(3, 2)}
    large = tmp_path / "large-grounding.safetensors"
    save_file(
        {"thinker.visual.w": torch.ones(2), "lora.0.q_proj.a": torch.ones(1, 2), "lora.0.q_proj.b": torch.ones(3, 1)},
        str(large),
        metadata={"lora_scale": "2.0"},
    )
    apply_grounding(state, large, lora=False)
    assert state["thinker.visual.w"].tolist() == [1.0, 1.0]
    assert not state["thinker.model.layers.0.self_attn.q_proj.weight"].any()


class _Tiny(torch.nn.Module):
    """A stand-in thinker: embeddings, `layers` linear maps and a shared head."""

    def __init__(self, layers: int, embed: torch.nn.Embedding, head: torch.nn.Linear) -> None:
        super().__init__()
        self.embed, self.lm_head = embed, head
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(layers))
        self.model = self

    def get_rope_index(self, ids, *_):
        return torch.arange(ids.shape[1]).expand(3, *ids.shape), None

    def forward(self, input_ids, attention_mask, position_ids):
        hidden = self.embed(input_ids)
        for layer in self.layers:
            hidden = hidden + torch.tanh(layer(hidden))
        return SimpleNamespace(last_hidden_state=hidden)


def test_the_text_stage_pulls_the_student_onto_the_teacher_and_is_zero_when_they_agree():
    torch.manual_seed(0)
    embed, head = torch.nn.Embedding(16, 4), torch.nn.Linear(4, 16)
    teacher, student = _Tiny(3, embed, head), _Tiny(1, embed, head)
    windows = torch.randint(0, 16, (4, 8))
    loss, stats = distil_loss(student, teacher, windows, np.random.default_rng(0))
    assert loss.item() > 0.01
    assert set(stats) == {"hidden error", "kl", "top-1 agreement"}
    loss.backward()
    assert student.layers[0].weight.grad is not None
    assert teacher.layers[0].weight.grad is None
    same, stats = distil_loss(teacher, teacher, windows, np.random.default_rng(0))
    assert same.item() == pytest.approx(0.0, abs=1e-6)
    assert stats["top-1 agreement"] == 1.0


def test_the_pool_switches_to_its_trained_spec_only_once_its_weights_are_committed(monkeypatch, tmp_path):
    from demo import checkpoints

    assert spec_of("small") == DEMO_SPECS["small"]  # no small weights committed: the random stand-in
    assert not DEMO_SPECS["small"].towers_from
    monkeypatch.setattr(checkpoints, "DEMO_WEIGHTS_DIR", tmp_path)
    (tmp_path / "small-grounding.safetensors").write_bytes(b"committed")
    assert spec_of("small") == TRAINED_SPECS["small"]
    assert spec_of("large") == DEMO_SPECS["large"]  # no trained spec of its own: its weights change no spec
    # Staged weights are committed but not served: the pool stays as it was unless asked to serve them.
    (tmp_path / "small-grounding.safetensors").unlink()
    staged = tmp_path / checkpoints.STAGED_WEIGHTS_DIR / "small-grounding.safetensors"
    staged.parent.mkdir()
    staged.write_bytes(b"staged")
    monkeypatch.delenv(checkpoints.SERVE_STAGED_ENV, raising=False)
    assert checkpoints.grounding_weights("small") is None
    assert spec_of("small") == DEMO_SPECS["small"]
    assert spec_of("small", training=True) == TRAINED_SPECS["small"]
    monkeypatch.setenv(checkpoints.SERVE_STAGED_ENV, "1")
    assert checkpoints.grounding_weights("small") == staged
    assert spec_of("small") == TRAINED_SPECS["small"]
    # A pool with served weights and staged ones: the served unless asked, the staged when asked.
    served = tmp_path / "large-grounding.safetensors"
    served.write_bytes(b"served")
    assert checkpoints.grounding_weights("large") == served
    (staged.parent / "large-grounding.safetensors").write_bytes(b"staged")
    assert checkpoints.grounding_weights("large") == staged.parent / "large-grounding.safetensors"
    monkeypatch.delenv(checkpoints.SERVE_STAGED_ENV)
    assert checkpoints.grounding_weights("large") == served
