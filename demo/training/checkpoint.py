"""A training run's state on disk: where `tessera models train-demo` starts from, and its checkpoints.

`start_from` loads an earlier run's exported weights (`--init`); `save_checkpoint` and `resume` keep and reload
the whole run (towers, adapter, heads, optimizer, step and history) in its work directory, so a run stopped at
any point goes on from its last checkpoint when started again with the same settings.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from demo.training.trainer import Trainer


def start_from(trainer: Trainer, path: Path) -> None:
    """Loads an earlier run's exported weights: the vision tower, the audio tower's trained part (unless
    `init_audio` is off), the adapter and the label head (the heads used only in training start afresh)."""
    from safetensors.torch import load_file

    trainer.init_sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    tensors = load_file(str(path))
    if trainer.config.towers:  # the towers are another pool's (`borrow_towers`); the text model is this run's
        _copy_in({**trainer.lora, **trainer.text_trainable()}, tensors, path)
        trainer.progress(f"starting from {path}")
        return
    visual = {k.removeprefix("thinker.visual."): v for k, v in tensors.items() if k.startswith("thinker.visual.")}
    trainer.thinker.visual.load_state_dict(visual)
    audio, lora = trainer.audio_trainable(), trainer.lora
    label = {k.removeprefix("label_head."): v for k, v in tensors.items() if k.startswith("label_head.")}
    _copy_in({**(audio if trainer.config.init_audio else {}), **lora}, tensors, path)
    trainer.heads["label"].load_state_dict(label)
    if trainer.config.init_audio and trainer.config.audio_steps:
        trainer.fit_audio_length()
    elif trainer.config.init_audio:
        # no audio stage follows: the tower stays as the adapter it comes with learned to read it
        trainer.progress("  the audio tower is kept as it was trained")
    else:
        trainer.progress("  the audio tower starts from Whisper's own weights")
    trainer.progress(f"starting from {path}")


def _copy_in(parameters: dict[str, Any], tensors: dict[str, Any], path: Path) -> None:
    """Copies exported `tensors` into the run's `parameters` of the same names; every one must be there."""
    import torch

    missing = [k for k in parameters if k not in tensors]
    if missing:
        raise RuntimeError(f"{path} lacks {missing[:3]}: made with other settings")
    with torch.no_grad():
        for k, p in parameters.items():
            p.copy_(tensors[k])


def borrow_towers(trainer: Trainer, path: Path) -> None:
    """Loads another pool's exported vision tower, audio tower (its trained part) and label head, which this run
    reads media with and never trains (`towers`)."""
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    visual = {k.removeprefix("thinker.visual."): v for k, v in tensors.items() if k.startswith("thinker.visual.")}
    trainer.thinker.visual.load_state_dict(visual)
    _copy_in(trainer.audio_trainable(), tensors, path)
    trainer.heads["label"].load_state_dict(
        {k.removeprefix("label_head."): v for k, v in tensors.items() if k.startswith("label_head.")}
    )
    trainer.progress(f"reading media with the towers of {path}")


def _state(trainer: Trainer) -> dict[str, Any]:
    return {
        "step": trainer.step,
        "stage": trainer.stage,
        "visual": trainer.thinker.visual.state_dict(),
        "audio": {k: v.detach() for k, v in trainer.audio_trainable().items()},
        "lora": {k: v.detach() for k, v in trainer.lora.items()},
        "text": {k: v.detach() for k, v in trainer.text_trainable().items()},
        "label": trainer.heads["label"].state_dict(),
        "coordinates": trainer.heads["coordinates"].state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "history": trainer.history,
        "config": asdict(trainer.config),
    }


def save_checkpoint(trainer: Trainer) -> None:
    """Writes the run's state to its work directory, replacing the last checkpoint only once written whole."""
    import torch

    trainer.work_dir.mkdir(parents=True, exist_ok=True)
    partial = trainer.work_dir / "checkpoint.pt.partial"
    torch.save(_state(trainer), partial)
    partial.replace(trainer.work_dir / "checkpoint.pt")


def resume(trainer: Trainer) -> bool:
    """Loads the last checkpoint of the run's work directory, if there is one, and says whether there was."""
    import torch

    path = trainer.work_dir / "checkpoint.pt"
    if not path.exists():
        return False
    state = torch.load(path, weights_only=False)
    if state["config"] != asdict(trainer.config):
        raise RuntimeError(f"{path} was made with other settings; remove it to start again")
    trainer.thinker.visual.load_state_dict(state["visual"])
    with torch.no_grad():
        for k, v in state["lora"].items():
            trainer.lora[k].copy_(v)
        text = trainer.text_trainable()
        for k, v in state.get("text", {}).items():
            text[k].copy_(v)
        audio = trainer.audio_trainable()
        for k, v in state["audio"].items():
            audio[k].copy_(v)
    trainer.heads["label"].load_state_dict(state["label"])
    trainer.heads["coordinates"].load_state_dict(state["coordinates"])
    trainer.configure(state["stage"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.step = int(state["step"])
    trainer.history = list(state["history"])
    trainer.progress(f"resumed at step {trainer.step} of {trainer.config.total_steps} ({trainer.stage} stage)")
    return True
