"""Trained grounding weights (`tessera models train-demo`) put into a demo checkpoint as `build-demo` assembles it:
the vision tower replaced, the audio tower's trained part laid over Whisper's encoder, the LoRA merged into the
text model, and the tower's label head handed back to be written beside the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def merge_lora(state: dict[str, Any], lora: dict[str, Any], scale: float, prefix: str = "thinker.model.") -> None:
    """Folds LoRA updates into a checkpoint's q and v weights in place: W += scale * B @ A."""
    for key, a in lora.items():
        if not key.endswith(".a"):
            continue
        _, layer, name, _ = key.split(".")
        b = lora[key[:-2] + ".b"]
        target = f"{prefix}layers.{layer}.self_attn.{name}.weight"
        if target not in state or tuple(state[target].shape) != (b.shape[0], a.shape[1]):
            raise RuntimeError(f"LoRA update {key} does not fit {target}")
        state[target] = (state[target] + scale * (b @ a)).contiguous()


def _read(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata() or {}  # noqa: SIM118 (safe_open has no __iter__)


def apply_text(state: dict[str, Any], path: Path) -> None:
    """Puts the text model's trained layers of `path` (`thinker.model.*`, stored as float16) into a checkpoint's
    state, as float32: a pool whose towers come from another pool's weights stores its text model alone."""
    tensors, _ = _read(path)
    text = {k: v for k, v in tensors.items() if k.startswith("thinker.model.")}
    misfits = [k for k, v in text.items() if k not in state or state[k].shape != v.shape]
    if misfits or not text:
        raise RuntimeError(f"{path} does not fit this checkpoint's text model: {misfits[:4] or 'no text weights'}")
    state.update({k: v.float().contiguous() for k, v in text.items()})


def apply_grounding(state: dict[str, Any], path: Path, *, lora: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
    """Puts trained grounding weights into a checkpoint's state (the vision tower replaced, the LoRA merged unless
    `lora` is off: the towers alone serve another pool) and returns the tower's label head with its metadata (the
    label names), for `serving.encoders.detection`."""
    tensors, metadata = _read(path)
    scale = float(metadata["lora_scale"])
    tower = {k: v for k, v in tensors.items() if k.startswith("thinker.visual.")}
    misfits = [k for k, v in tower.items() if k not in state or state[k].shape != v.shape]
    if misfits or len(tower) != sum(k.startswith("thinker.visual.") for k in state):
        raise RuntimeError(f"{path} does not fit this checkpoint's vision tower: {misfits[:4]}")
    state.update(tower)
    # The audio tower starts as Whisper's encoder; only the parts training changed are stored (its top layers,
    # `ln_post` and the projection), so any subset of the tower may come.
    audio = {k: v for k, v in tensors.items() if k.startswith("thinker.audio_tower.")}
    misfits = [k for k, v in audio.items() if k not in state or state[k].shape != v.shape]
    if misfits:
        raise RuntimeError(f"{path} does not fit this checkpoint's audio tower: {misfits[:4]}")
    state.update(audio)
    if lora:
        merge_lora(state, {k: v for k, v in tensors.items() if k.startswith("lora.")}, scale)
    head = {k.removeprefix("label_head."): v for k, v in tensors.items() if k.startswith("label_head.")}
    words = {"audio_words": metadata["audio_words"]} if "audio_words" in metadata else {}
    return head, {"labels": metadata.get("labels", "[]"), **words}


def judge_calibration(weights: Path | None) -> dict[str, Any] | None:
    """The judge threshold the weights' manifest records (`judge_calibration`, chosen by `tessera eval grounding
    --calibrate-judge` on the calibration split), or None."""
    manifest = None if weights is None else weights.with_suffix(".json")
    if manifest is None or not manifest.is_file():
        return None
    return json.loads(manifest.read_text()).get("judge_calibration") or None


def write_judge_calibration(weights: Path, target: Path) -> None:
    """The weights' judge calibration, if they have one, as the checkpoint's grounding/judge.json, which the
    server reads."""
    calibration = judge_calibration(weights)
    if calibration is None:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(calibration, indent=2) + "\n")
