"""A training run's checkpoints and starting weights (demo.training.checkpoint), on stand-in towers."""

from __future__ import annotations

import hashlib

import pytest
import torch
from safetensors.torch import save_file

from demo.training.checkpoint import resume, save_checkpoint, start_from


def _run(stand_in_trainer, work_dir, seed: int = 0, **settings):
    torch.manual_seed(seed)
    trainer = stand_in_trainer(1, **settings)
    trainer.work_dir = work_dir
    trainer.said = []
    trainer.progress = trainer.said.append
    trainer.step, trainer.history = 0, []
    trainer.configure("vision")
    return trainer


def _weights(trainer) -> dict[str, torch.Tensor]:
    return {
        **{f"visual.{k}": v for k, v in trainer.thinker.visual.state_dict().items()},
        **{k: v.detach().clone() for k, v in trainer.audio_trainable().items()},
        **{k: v.detach().clone() for k, v in trainer.lora.items()},
        **{f"{name}.{k}": v for name, head in trainer.heads.items() for k, v in head.state_dict().items()},
    }


def test_a_resumed_run_goes_on_from_its_last_checkpoint(stand_in_trainer, tmp_path):
    first = _run(stand_in_trainer, tmp_path, seed=1)
    first.configure("joint")
    with torch.no_grad():
        first.lora["lora.a"].fill_(0.5)
    sum(p.sum() ** 2 for p in first.trainable).backward()
    first.optimizer.step()  # the optimizer now holds moments worth keeping
    first.step, first.history = 7, [{"step": 7, "loss": 1.5}]
    save_checkpoint(first)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]  # the partial file was renamed

    again = _run(stand_in_trainer, tmp_path, seed=2)
    assert any(not torch.equal(v, _weights(first)[k]) for k, v in _weights(again).items())
    assert resume(again)
    assert (again.step, again.stage, again.history) == (7, "joint", [{"step": 7, "loss": 1.5}])
    saved, loaded = _weights(first), _weights(again)
    assert saved.keys() == loaded.keys()
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)
    moments = [first.optimizer.state_dict()["state"], again.optimizer.state_dict()["state"]]
    assert moments[0]
    assert moments[0].keys() == moments[1].keys()
    assert all(torch.equal(moments[0][k]["exp_avg"], moments[1][k]["exp_avg"]) for k in moments[0])
    assert again.said == [f"resumed at step 7 of {again.config.total_steps} (joint stage)"]


def test_a_run_without_a_checkpoint_starts_from_the_beginning(stand_in_trainer, tmp_path):
    trainer = _run(stand_in_trainer, tmp_path / "nothing here")
    assert not resume(trainer)
    assert trainer.step == 0


def test_a_checkpoint_made_with_other_settings_is_refused(stand_in_trainer, tmp_path):
    save_checkpoint(_run(stand_in_trainer, tmp_path))
    other = _run(stand_in_trainer, tmp_path, lr=1e-5)
    with pytest.raises(RuntimeError, match="made with other settings; remove it to start again"):
        resume(other)


def _exported(trainer) -> dict[str, torch.Tensor]:
    """What an exported `<pool>-grounding.safetensors` holds for `trainer`'s stand-ins."""
    return {
        **{f"thinker.visual.{k}": v.clone() for k, v in trainer.thinker.visual.state_dict().items()},
        **{k: v.detach().clone() for k, v in trainer.audio_trainable().items()},
        **{k: v.detach().clone() for k, v in trainer.lora.items()},
        **{f"label_head.{k}": v.clone() for k, v in trainer.heads["label"].state_dict().items()},
    }


def test_a_run_starts_from_earlier_weights_and_records_their_digest(stand_in_trainer, tmp_path):
    earlier = _exported(_run(stand_in_trainer, tmp_path, seed=3))
    path = tmp_path / "large-grounding.safetensors"
    save_file(earlier, str(path))
    trainer = _run(stand_in_trainer, tmp_path, seed=4, audio_steps=0)
    start_from(trainer, path)
    now = _exported(trainer)
    assert all(torch.equal(now[k], earlier[k]) for k in earlier)
    assert trainer.init_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert trainer.said == ["  the audio tower is kept as it was trained", f"starting from {path}"]


def test_weights_made_with_other_settings_are_refused(stand_in_trainer, tmp_path):
    earlier = _exported(_run(stand_in_trainer, tmp_path))
    del earlier["lora.a"]
    path = tmp_path / "large-grounding.safetensors"
    save_file(earlier, str(path))
    with pytest.raises(RuntimeError, match=r"lacks \['lora.a'\]: made with other settings"):
        start_from(_run(stand_in_trainer, tmp_path, audio_steps=0), path)
