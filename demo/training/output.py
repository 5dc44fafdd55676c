"""What a finished `tessera models train-demo` run leaves: the exported weights (vision tower, the trained part of
the audio tower, LoRA and the calibrated label head) with a manifest of the run and the runs behind it, and a quick
held-out check of the model as it stands, through transformers."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from demo.answers import check_answer
from demo.golden import GoldenItem, golden_set
from demo.training.calibration import calibrate
from demo.training.stage_losses import ATTRIBUTES
from demo.training.text_keep import text_item
from demo.training.thinker import prompt_text
from demo.world import COLOURS, SHAPES, WORLD_SHAPE_CELLS
from serving.encoders.detection import LabelHead

if TYPE_CHECKING:
    from demo.training.trainer import Trainer

WEIGHTS_NAME = "{pool}-grounding.safetensors"
MANIFEST_NAME = "{pool}-grounding.json"


def lineage_of(weights: Path) -> list[dict[str, Any]]:
    """The runs behind exported `weights`, newest first (each one's settings, weights hash and last figures, and
    whatever else its manifest records, such as how merged weights were put together), read from the manifest
    beside them and the lineage it records; empty when no manifest is there."""
    manifest = weights.with_suffix(".json")
    if not manifest.exists():
        return []
    recorded = json.loads(manifest.read_text())
    run = {k: recorded.get(k) for k in ("config", "weights_sha256", "final", "last_50", "label_head_calibration")}
    run.update({k: v for k, v in recorded.items() if k not in run and k != "lineage"})
    return [run, *recorded.get("lineage", [])]


def answer(trainer: Trainer, item: GoldenItem, max_new_tokens: int = 48) -> str:
    """Greedy answer of the model as it stands (LoRA unmerged), through transformers."""
    import torch

    enc = trainer.processor(
        text=[prompt_text(item.question, media=item.media_order)],
        images=[item.image()] if item.scene is not None else None,
        audio=[np.asarray(item.audio())] if item.clip is not None else None,
        return_tensors="pt",
    )
    with torch.no_grad():
        out = trainer.thinker.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
    return str(trainer.processor.tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True))


# Everyday questions no run trains on (demo.training.text_keep's prompts leave out France on purpose), asked at the
# end of a run so its manifest shows whether the text model still reads as language.
TEXT_PROBES = (
    "What is the capital of France?",
    "What colour is grass?",
    "What do cows eat?",
    "Write one sentence about the weather today.",
)


def text_probe(trainer: Trainer) -> dict[str, Any]:
    """The model's greedy answers to `TEXT_PROBES`, and whether it names Paris as France's capital."""
    answers = {q: answer(trainer, text_item(0, q, "")).strip() for q in TEXT_PROBES}
    return {"answers": answers, "paris": "paris" in answers[TEXT_PROBES[0]].lower()}


def quick_eval(
    trainer: Trainer, limit: int, mixes: tuple[str, ...] = ("image", "audio", "image+audio")
) -> dict[str, Any]:
    """Accuracy on the first `limit` held-out items of each mix, by mix and question kind, and the text probe."""
    items = [i for mix in mixes for i in [i for i in golden_set("heldout") if i.mix == mix][:limit]]
    by_kind: dict[str, list[bool]] = {}
    for n, item in enumerate(items, 1):
        verdict = check_answer(item, answer(trainer, item))
        by_kind.setdefault(f"{item.mix}/{item.kind}", []).append(bool(verdict.correct))
        if n % 10 == 0:
            trainer.progress(f"  quick eval {n}/{len(items)}")
    by_mix: dict[str, list[bool]] = {}
    for key, values in by_kind.items():
        by_mix.setdefault(key.split("/")[0], []).extend(values)
    total = [v for vs in by_kind.values() for v in vs]
    return {
        "items": len(total),
        "accuracy": sum(total) / max(1, len(total)),
        "by_mix": {k: sum(v) / len(v) for k, v in sorted(by_mix.items())},
        "by_kind": {k: sum(v) / len(v) for k, v in sorted(by_kind.items())},
        "text": text_probe(trainer),
    }


def export(trainer: Trainer, out_dir: Path) -> Path:
    """The trained tensors (vision tower as `thinker.visual.*`, the trained part of the audio tower, LoRA,
    label head) and a manifest beside them."""
    from safetensors.torch import save_file

    if trainer.config.towers:
        return _export_text(trainer, out_dir)
    tensors = {f"thinker.visual.{k}": v.detach().contiguous() for k, v in trainer.thinker.visual.state_dict().items()}
    tensors.update({k: v.detach().contiguous() for k, v in trainer.audio_trainable().items()})
    tensors.update({k: v.detach().contiguous() for k, v in trainer.lora.items()})
    names = [f"{shape}:{colour}" for shape in SHAPES for colour in COLOURS]  # label i + 1, as `label_of`
    head = trainer.heads["label"]
    trainer.progress("calibrating the label head's 'nothing here' label on fresh scenes")
    calibration = calibrate(
        trainer.thinker,
        trainer.processor,
        LabelHead(head.weight.detach(), head.bias.detach(), names, WORLD_SHAPE_CELLS),
    )
    bias = head.bias.detach().clone()
    bias[0] -= calibration.margin
    tensors.update({"label_head.weight": head.weight.detach().contiguous(), "label_head.bias": bias})
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / WEIGHTS_NAME.format(pool=trainer.config.pool)
    metadata = {
        "lora_scale": str(trainer.config.lora_scale),
        "labels": json.dumps(names),
        "audio_words": json.dumps(list(trainer.targets.vocabulary)),  # CTC class i + 1, as grounding.hearing reads
    }
    save_file(tensors, str(path), metadata=metadata)

    keys = {
        "vision": [
            "loss",
            *(f"{name} accuracy" for name in ATTRIBUTES),
            *("centre error", "empty error", "cell accuracy"),
        ],
        "audio": ["ctc loss", "token error", "clip accuracy"],
        "joint": ["answer loss", "text loss", "cell accuracy", "clip accuracy"],
    }
    # The starting weights are named by their run (the lineage's first entry, and `started_from_sha256`), not
    # by a path that only meant something on the machine that trained them.
    config = {**asdict(trainer.config), **({"init": "(the run of lineage[0])"} if trainer.config.init else {})}
    manifest = {
        "config": config,
        "weights_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "started_from_sha256": trainer.init_sha256,
        "lineage": lineage_of(Path(trainer.config.init)) if trainer.config.init else [],
        "final": trainer.history[-1] if trainer.history else None,
        "last_50": _last_50(trainer, keys),
        "label_head_calibration": {
            "margin": calibration.margin,
            "scenes agreeing, by margin": {str(m): round(v, 4) for m, v in calibration.agreement.items()},
        },
    }
    (out_dir / MANIFEST_NAME.format(pool=trainer.config.pool)).write_text(json.dumps(manifest, indent=2) + "\n")
    return path


def _last_50(trainer: Trainer, keys: dict[str, list[str]]) -> dict[str, dict[str, float | None]]:
    def mean_of(key: str, stage: str) -> float | None:
        values = [h[key] for h in trainer.history if key in h and trainer.config.stage(int(h["step"]) - 1) == stage]
        return float(np.mean(values[-50:])) if values else None

    return {stage: {k: mean_of(k, stage) for k in names} for stage, names in keys.items()}


def _export_text(trainer: Trainer, out_dir: Path) -> Path:
    """A pool that reads media with another pool's towers (`towers`) exports its text model alone: the layers that
    trained whole (as float16) and any LoRA, with a manifest; `build-demo` lays them over the cut SmolLM2."""
    import torch
    from safetensors.torch import save_file

    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in trainer.text_trainable().items()}
    tensors.update({k: v.detach().contiguous() for k, v in trainer.lora.items()})
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / WEIGHTS_NAME.format(pool=trainer.config.pool)
    save_file(tensors, str(path), metadata={"lora_scale": str(trainer.config.lora_scale)})
    towers = Path(trainer.config.towers)
    config = {**asdict(trainer.config), "towers": towers.name}
    if trainer.config.init:
        config["init"] = "(the run of lineage[0])"
    keys = {"text": ["hidden error", "kl", "top-1 agreement"], "joint": ["answer loss", "text loss"]}
    manifest = {
        "config": config,
        "weights_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "towers_sha256": hashlib.sha256(towers.read_bytes()).hexdigest(),
        "prose_sha256": trainer.prose_sha256,
        "started_from_sha256": trainer.init_sha256,
        "lineage": lineage_of(Path(trainer.config.init)) if trainer.config.init else [],
        "final": trainer.history[-1] if trainer.history else None,
        "last_50": _last_50(trainer, keys),
    }
    (out_dir / MANIFEST_NAME.format(pool=trainer.config.pool)).write_text(json.dumps(manifest, indent=2) + "\n")
    return path
