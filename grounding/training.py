"""`tessera models train-demo`: teach a demo pool's vision tower to see the synthetic world of grounding.world.

What trains, on the pool's own Qwen2.5-Omni thinker (the checkpoint `build-demo` made, so what vLLM serves is what
trained):
- the whole vision tower and its patch merger, from their seeded random start;
- a label head on the merger's outputs: each merged image token is told which shape and colour covers the centre
  of its cell, or none. This cheap per-token supervision teaches the tower to see long before the language loss
  alone would, and the head is kept: the grounding scorer reads it as the tower's detected content;
- LoRA (rank 8) on every text layer's q and v projections, since a frozen text model cannot learn to read the new
  image tokens (it answers yes/no at chance, and attaches colours to the wrong shape).
The text model's own weights stay frozen; `build-demo` merges the LoRA into q and v.

Training is seeded and deterministic on one machine: items come from `grounding.golden.training_items(TRAIN_SEED)`,
never from the held-out seeds, and torch runs on a fixed number of threads. It checkpoints every
`checkpoint_every` steps into its work directory and resumes from the last checkpoint when run again; a finished
run writes `<out>/<pool>-grounding.safetensors` (tower, merger, label head, LoRA) plus a JSON manifest.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grounding.answers import check_answer
from grounding.golden import GoldenItem, golden_set, training_items
from grounding.world import COLOURS, SHAPES, Scene

Progress = Callable[[str], None]

TRAIN_SEED = 1
SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"  # the served template's
IMAGE_PART = "<|vision_start|><|IMAGE|><|vision_end|>"
LABELS = 1 + len(SHAPES) * len(COLOURS)  # 0: no shape; then shape-major, colour-minor
LORA_TARGETS = ("q_proj", "v_proj")
WEIGHTS_NAME = "{pool}-grounding.safetensors"
MANIFEST_NAME = "{pool}-grounding.json"


@dataclass(frozen=True)
class TrainConfig:
    pool: str = "large"
    steps: int = 700
    batch: int = 12
    lr: float = 1e-3
    lora_rank: int = 8
    lora_alpha: float = 16.0
    label_weight: float = 1.0
    warmup_steps: int = 30
    threads: int = 2
    seed: int = TRAIN_SEED
    checkpoint_every: int = 50

    @property
    def lora_scale(self) -> float:
        return self.lora_alpha / self.lora_rank


def label_of(shape_kind: str, colour: str) -> int:
    return 1 + SHAPES.index(shape_kind) * len(COLOURS) + COLOURS.index(colour)


def describe_label(label: int) -> tuple[str, str] | None:
    if label == 0:
        return None
    return SHAPES[(label - 1) // len(COLOURS)], COLOURS[(label - 1) % len(COLOURS)]


def cell_labels(scene: Scene, rows: int, cols: int) -> np.ndarray:
    """For each merged token (a `rows` x `cols` raster over the image), the label of the shape covering the centre
    of its cell, or 0. A shape covers a point within 0.9 of its radius, so a cell only grazing an outline is empty;
    and every shape labels at least the cell holding its own centre, since at the served resolution (a cell is
    28 px of an image resized to at most 224x224) a small shape covers no cell's centre."""
    out = np.zeros((rows, cols), dtype=np.int64)
    for r in range(rows):
        y = (r + 0.5) * scene.height / rows
        for c in range(cols):
            x = (c + 0.5) * scene.width / cols
            for shape in scene.shapes:
                if math.hypot(x - shape.cx, y - shape.cy) <= 0.9 * shape.radius:
                    out[r, c] = label_of(shape.kind, shape.colour)
    for shape in scene.shapes:
        r = min(rows - 1, int(shape.cy * rows / scene.height))
        c = min(cols - 1, int(shape.cx * cols / scene.width))
        out[r, c] = label_of(shape.kind, shape.colour)
    return out


def prompt_text(question: str, answer: str | None = None) -> str:
    """The served chat template's rendering of one user turn (the image, then the question)."""
    text = (
        f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{IMAGE_PART}{question}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    return text if answer is None else text + answer + "<|im_end|>"


def install_lora(text_model: Any, rank: int, scale: float, seed: int) -> dict[str, Any]:
    """Wraps q and v of every layer with a low-rank update; returns the trainable parameters by name."""
    import torch
    from torch import nn

    class _LoRA(nn.Module):
        def __init__(self, base: nn.Linear) -> None:
            super().__init__()
            self.base = base
            self.lora_a = nn.Parameter(torch.empty(rank, base.in_features))
            self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))
            nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.base(x) + (x @ self.lora_a.t() @ self.lora_b.t()) * scale

    torch.manual_seed(seed)
    params: dict[str, Any] = {}
    for i, layer in enumerate(text_model.layers):
        for name in LORA_TARGETS:
            wrapped = _LoRA(getattr(layer.self_attn, name))
            setattr(layer.self_attn, name, wrapped)
            params[f"lora.{i}.{name}.a"] = wrapped.lora_a
            params[f"lora.{i}.{name}.b"] = wrapped.lora_b
    return params


class _Batches:
    """Endless training batches: processor tensors, answer labels and per-token cell labels."""

    def __init__(self, processor: Any, config: TrainConfig, skip: int) -> None:
        self.processor = processor
        self.config = config
        self.items: Iterator[GoldenItem] = training_items(config.seed, mixes=("image",))
        for _ in range(skip * config.batch):  # a resumed run continues where its data left off
            next(self.items)

    def next(self) -> dict[str, Any]:
        import torch

        items = [next(self.items) for _ in range(self.config.batch)]
        images = [item.image() for item in items]
        full = [prompt_text(item.question, item.answer) for item in items]
        prompts = [prompt_text(item.question) for item in items]
        enc = self.processor(text=full, images=images, padding=True, padding_side="right", return_tensors="pt")
        labels = enc["input_ids"].clone()
        labels[enc["attention_mask"] == 0] = -100
        for row, prompt in enumerate(prompts):
            expanded = self.processor(text=[prompt], images=[images[row]], return_tensors="pt")["input_ids"]
            labels[row, : expanded.shape[1]] = -100
        merge = 2
        cells = []
        for item, (_, h, w) in zip(items, enc["image_grid_thw"].tolist(), strict=True):
            assert item.scene is not None
            cells.append(torch.from_numpy(cell_labels(item.scene, h // merge, w // merge).reshape(-1)))
        return {**enc, "labels": labels, "cell_labels": torch.cat(cells)}


def _lr(step: int, config: TrainConfig) -> float:
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def load_thinker(checkpoint: Path) -> tuple[Any, Any]:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoProcessor, Qwen2_5OmniThinkerForConditionalGeneration

    config = AutoConfig.from_pretrained(checkpoint)
    thinker = Qwen2_5OmniThinkerForConditionalGeneration._from_config(config.thinker_config, dtype=torch.float32)
    state = load_file(str(checkpoint / "model.safetensors"))
    missing, unexpected = thinker.load_state_dict(
        {k.removeprefix("thinker."): v for k, v in state.items() if k.startswith("thinker.")}, strict=False
    )
    if unexpected or [m for m in missing if not m.endswith("rotary_emb.inv_freq")]:
        raise RuntimeError(f"checkpoint {checkpoint} does not fit the thinker: {missing[:4]} {unexpected[:4]}")
    return thinker, AutoProcessor.from_pretrained(checkpoint)


class Trainer:
    def __init__(self, checkpoint: Path, work_dir: Path, config: TrainConfig, progress: Progress) -> None:
        import torch

        torch.set_num_threads(config.threads)
        torch.manual_seed(config.seed)
        self.config = config
        self.progress = progress
        self.work_dir = work_dir
        self.checkpoint = checkpoint
        self.thinker, self.processor = load_thinker(checkpoint)
        thinker = self.thinker
        for p in thinker.parameters():
            p.requires_grad_(False)
        for p in thinker.visual.parameters():
            p.requires_grad_(True)
        self.lora = install_lora(thinker.model, config.lora_rank, config.lora_scale, config.seed)
        hidden = thinker.config.text_config.hidden_size
        self.head = torch.nn.Linear(hidden, LABELS)
        self.trainable = [*thinker.visual.parameters(), *self.lora.values(), *self.head.parameters()]
        self.optimizer = torch.optim.AdamW(self.trainable, lr=config.lr, weight_decay=0.0)
        self.step = 0
        self.history: list[dict[str, float]] = []
        self._resume()
        self.batches = _Batches(self.processor, config, skip=self.step)

    # -- checkpoints ---------------------------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "visual": self.thinker.visual.state_dict(),
            "lora": {k: v.detach() for k, v in self.lora.items()},
            "head": self.head.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "history": self.history,
            "config": asdict(self.config),
        }

    def save_checkpoint(self) -> None:
        import torch

        self.work_dir.mkdir(parents=True, exist_ok=True)
        partial = self.work_dir / "checkpoint.pt.partial"
        torch.save(self._state(), partial)
        partial.replace(self.work_dir / "checkpoint.pt")

    def _resume(self) -> None:
        import torch

        path = self.work_dir / "checkpoint.pt"
        if not path.exists():
            return
        state = torch.load(path, weights_only=False)
        if state["config"] != asdict(self.config):
            raise RuntimeError(f"{path} was made with other settings; remove it to start again")
        self.thinker.visual.load_state_dict(state["visual"])
        with torch.no_grad():
            for k, v in state["lora"].items():
                self.lora[k].copy_(v)
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        self.history = list(state["history"])
        self.progress(f"resumed at step {self.step} of {self.config.steps}")

    # -- one step ------------------------------------------------------------------------------------------------

    def loss(self, batch: dict[str, Any]) -> tuple[Any, float, float]:
        import torch
        from torch.nn.functional import cross_entropy

        thinker = self.thinker
        grid = batch["image_grid_thw"]
        image_embeds = thinker.visual(batch["pixel_values"], grid_thw=grid).pooler_output
        label_logits = self.head(image_embeds)
        label_loss = cross_entropy(label_logits, batch["cell_labels"])
        input_ids = batch["input_ids"]
        embeds = thinker.model.embed_tokens(input_ids)
        mask = (input_ids == thinker.config.image_token_id).unsqueeze(-1)
        embeds = embeds.masked_scatter(mask, image_embeds.to(embeds.dtype))
        position_ids, _ = thinker.get_rope_index(input_ids, grid, None, batch["attention_mask"])
        hidden = thinker.model(
            inputs_embeds=embeds, attention_mask=batch["attention_mask"], position_ids=position_ids
        ).last_hidden_state
        labels = batch["labels"]
        # Only answer positions go through lm_head: the next token after each of them is a label.
        targets = labels[:, 1:]
        where = targets != -100
        logits = thinker.lm_head(hidden[:, :-1][where])
        lm_loss = cross_entropy(logits, targets[where])
        total = lm_loss + self.config.label_weight * label_loss
        with torch.no_grad():
            accuracy = (label_logits.argmax(-1) == batch["cell_labels"]).float().mean().item()
        return total, float(lm_loss.item()), accuracy

    def train(self) -> None:
        import torch

        config = self.config
        started = time.monotonic()
        first = self.step
        while self.step < config.steps:
            for group in self.optimizer.param_groups:
                group["lr"] = _lr(self.step, config)
            batch = self.batches.next()
            total, lm_loss, cell_accuracy = self.loss(batch)
            self.optimizer.zero_grad(set_to_none=True)
            total.backward()
            torch.nn.utils.clip_grad_norm_(self.trainable, 1.0)
            self.optimizer.step()
            self.step += 1
            self.history.append({"step": self.step, "lm_loss": lm_loss, "cell_accuracy": cell_accuracy})
            done = self.step - first
            per_step = (time.monotonic() - started) / done
            bar = "#" * int(30 * self.step / config.steps)
            minutes_left = per_step * (config.steps - self.step) / 60
            self.progress(
                f"[{bar:<30}] step {self.step}/{config.steps}  answer loss {lm_loss:.3f}  "
                f"cells {cell_accuracy:.0%}  {per_step:.1f} s/step, ~{minutes_left:.0f} min left"
            )
            if self.step % config.checkpoint_every == 0 or self.step == config.steps:
                self.save_checkpoint()

    # -- output --------------------------------------------------------------------------------------------------

    def answer(self, item: GoldenItem, max_new_tokens: int = 48) -> str:
        """Greedy answer of the model as it stands (LoRA unmerged), through transformers."""
        import torch

        enc = self.processor(text=[prompt_text(item.question)], images=[item.image()], return_tensors="pt")
        with torch.no_grad():
            out = self.thinker.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
        return str(self.processor.tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True))

    def quick_eval(self, limit: int) -> dict[str, Any]:
        """Accuracy on the first `limit` image items of the held-out set, by question kind."""
        items = [i for i in golden_set("heldout") if i.mix == "image"][:limit]
        by_kind: dict[str, list[bool]] = {}
        for n, item in enumerate(items, 1):
            verdict = check_answer(item, self.answer(item))
            by_kind.setdefault(item.kind, []).append(bool(verdict.correct))
            if n % 10 == 0:
                self.progress(f"  quick eval {n}/{len(items)}")
        total = [v for vs in by_kind.values() for v in vs]
        return {
            "items": len(total),
            "accuracy": sum(total) / max(1, len(total)),
            "by_kind": {k: sum(v) / len(v) for k, v in sorted(by_kind.items())},
        }

    def export(self, out_dir: Path) -> Path:
        """The trained tensors (tower as `thinker.visual.*`, LoRA, label head) and a manifest beside them."""
        from safetensors.torch import save_file

        tensors = {f"thinker.visual.{k}": v.detach().contiguous() for k, v in self.thinker.visual.state_dict().items()}
        tensors.update({k: v.detach().contiguous() for k, v in self.lora.items()})
        tensors.update({f"label_head.{k}": v.detach().contiguous() for k, v in self.head.state_dict().items()})
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / WEIGHTS_NAME.format(pool=self.config.pool)
        names = [f"{shape}:{colour}" for shape in SHAPES for colour in COLOURS]  # label i + 1, as `label_of`
        save_file(tensors, str(path), metadata={"lora_scale": str(self.config.lora_scale), "labels": json.dumps(names)})
        manifest = {
            "config": asdict(self.config),
            "weights_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "final": self.history[-1] if self.history else None,
            "last_50": {
                "lm_loss": float(np.mean([h["lm_loss"] for h in self.history[-50:]])) if self.history else None,
                "cell_accuracy": float(np.mean([h["cell_accuracy"] for h in self.history[-50:]]))
                if self.history
                else None,
            },
        }
        (out_dir / MANIFEST_NAME.format(pool=self.config.pool)).write_text(json.dumps(manifest, indent=2) + "\n")
        return path
