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

Training runs in two stages on one step counter:
1. *image* (`steps`): the above, on image items.
2. *audio* (`audio_steps`): the vision tower and its label head are frozen; the audio tower (Whisper tiny.en's
   encoder, transplanted by `build-demo`) trains its top `audio_train_layers` layers, `ln_post` and its projection
   into the text model, with the LoRA, on a mix of audio, image+audio and image items (the image items keep the
   LoRA from forgetting what stage 1 taught it). A CTC head over the closed world's words reads the tower's
   output tokens: the audio counterpart of the label head, it makes each spoken word linearly readable from the
   tokens early on. It is used for training only.

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
AUDIO_PART = "<|audio_bos|><|AUDIO|><|audio_eos|>"
MEDIA_PART = {"image": IMAGE_PART, "audio": AUDIO_PART}
LABELS = 1 + len(SHAPES) * len(COLOURS)  # 0: no shape; then shape-major, colour-minor
LORA_TARGETS = ("q_proj", "v_proj")
WEIGHTS_NAME = "{pool}-grounding.safetensors"
MANIFEST_NAME = "{pool}-grounding.json"


@dataclass(frozen=True)
class TrainConfig:
    pool: str = "large"
    steps: int = 800
    batch: int = 8
    lr: float = 1e-3
    lora_rank: int = 8
    lora_alpha: float = 16.0
    label_weight: float = 1.0
    warmup_steps: int = 30
    threads: int = 2
    seed: int = TRAIN_SEED
    checkpoint_every: int = 50
    audio_steps: int = 500
    audio_train_layers: int = 2
    ctc_weight: float = 0.5

    @property
    def total_steps(self) -> int:
        return self.steps + self.audio_steps

    def stage(self, step: int) -> str:
        return "image" if step < self.steps else "audio"

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


def prompt_text(question: str, answer: str | None = None, media: tuple[str, ...] = ("image",)) -> str:
    """The served chat template's rendering of one user turn (the media in order, then the question)."""
    parts = "".join(MEDIA_PART[m] for m in media)
    text = (
        f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{parts}{question}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    return text if answer is None else text + answer + "<|im_end|>"


def _words(text: str) -> list[str]:
    return [w for w in (t.strip('.,:;!?"').lower() for t in text.split()) if w]


def ctc_vocabulary() -> tuple[str, ...]:
    """Every word the audio world's sentences use, in a fixed order (CTC class i + 1; 0 is the blank)."""
    from grounding.speech import COUNT_NOUNS, COUNTS, HOURS, NAMES, SPEECH_COLOURS, WEEKDAYS, Clip

    words: list[str] = []
    samples = (
        [Clip("meeting", {"weekday": d, "hour": h}) for d in WEEKDAYS for h in HOURS]
        + [Clip("call", {"name": n}) for n in NAMES]
        + [Clip("count", {"count": c, "noun": n}) for c in COUNTS for n in COUNT_NOUNS]
        + [Clip("colour", {"colour": c}) for c in SPEECH_COLOURS]
    )
    for clip in samples:
        for w in _words(clip.text):
            if w not in words:
                words.append(w)
    return tuple(words)


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
    """Endless training batches: processor tensors, answer labels, per-token cell labels and CTC targets.

    Stage 1 draws image items from `seed`; stage 2 draws from `seed + 1` per mix, in the proportions of
    `STAGE2_MIX`, so neither stage repeats the other's items and a resumed run continues where its data left off.
    """

    STAGE2_MIX = ("audio", "image+audio", "audio", "image", "audio", "image+audio", "audio", "image")

    def __init__(self, processor: Any, config: TrainConfig, step: int) -> None:
        self.processor = processor
        self.config = config
        self.vocabulary = {w: i + 1 for i, w in enumerate(ctc_vocabulary())}
        self.image_items: Iterator[GoldenItem] = training_items(config.seed, mixes=("image",))
        self.stage2: dict[str, Iterator[GoldenItem]] = {
            mix: training_items(config.seed + 1, mixes=(mix,)) for mix in set(self.STAGE2_MIX)
        }
        self.drawn = 0  # stage-2 items drawn
        for _ in range(min(step, config.steps) * config.batch):
            next(self.image_items)
        for _ in range(max(0, step - config.steps) * config.batch):
            self._stage2_item()

    def _stage2_item(self) -> GoldenItem:
        mix = self.STAGE2_MIX[self.drawn % len(self.STAGE2_MIX)]
        self.drawn += 1
        return next(self.stage2[mix])

    def next(self, step: int) -> dict[str, Any]:
        if self.config.stage(step) == "image":
            items = [next(self.image_items) for _ in range(self.config.batch)]
        else:
            items = [self._stage2_item() for _ in range(self.config.batch)]
        return self.encode(items)

    def encode(self, items: list[GoldenItem]) -> dict[str, Any]:
        import torch

        images = [item.image() for item in items if item.scene is not None]
        clips = [np.asarray(item.audio()) for item in items if item.clip is not None]
        full = [prompt_text(item.question, item.answer, item.media_order) for item in items]
        enc = self.processor(
            text=full,
            images=images or None,
            audio=clips or None,
            padding=True,
            padding_side="right",
            return_tensors="pt",
        )
        labels = enc["input_ids"].clone()
        labels[enc["attention_mask"] == 0] = -100
        for row, item in enumerate(items):
            alone = self.processor(
                text=[prompt_text(item.question, media=item.media_order)],
                images=[item.image()] if item.scene is not None else None,
                audio=[np.asarray(item.audio())] if item.clip is not None else None,
                return_tensors="pt",
            )
            labels[row, : alone["input_ids"].shape[1]] = -100
        batch: dict[str, Any] = {**enc, "labels": labels}
        if images:
            merge = 2
            cells = []
            scenes = [item.scene for item in items if item.scene is not None]
            for scene, (_, h, w) in zip(scenes, enc["image_grid_thw"].tolist(), strict=True):
                cells.append(torch.from_numpy(cell_labels(scene, h // merge, w // merge).reshape(-1)))
            batch["cell_labels"] = torch.cat(cells)
        if clips:
            batch["ctc_targets"] = [
                torch.tensor([self.vocabulary[w] for w in _words(item.clip.text)], dtype=torch.long)
                for item in items
                if item.clip is not None
            ]
        return batch


def _lr(step: int, config: TrainConfig, steps: int) -> float:
    """Warm-up, then cosine decay to a tenth, over one stage of `steps` steps (`step` counts from its start)."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, steps - config.warmup_steps)
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
    def __init__(
        self,
        checkpoint: Path,
        work_dir: Path,
        config: TrainConfig,
        progress: Progress,
        *,
        image_stage_from: Path | None = None,
    ) -> None:
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
        self.lora = install_lora(thinker.model, config.lora_rank, config.lora_scale, config.seed)
        hidden = thinker.config.text_config.hidden_size
        self.head = torch.nn.Linear(hidden, LABELS)
        self.ctc_head = torch.nn.Linear(hidden, 1 + len(ctc_vocabulary()))
        self.step = 0
        self.history: list[dict[str, float]] = []
        self.image_stage_sha256: str | None = None
        self._configure(config.stage(0))
        if not self._resume() and image_stage_from is not None:
            self._load_image_stage(image_stage_from)
        self.batches = _Batches(self.processor, config, step=self.step)

    # -- what trains in each stage -------------------------------------------------------------------------------

    def audio_trainable(self) -> dict[str, Any]:
        """The audio tower's parameters stage 2 trains, under their checkpoint names."""
        tower = self.thinker.audio_tower
        first = len(tower.layers) - self.config.audio_train_layers
        return {
            f"thinker.audio_tower.{name}": p
            for name, p in tower.named_parameters()
            if name.startswith(("ln_post.", "proj."))
            or (name.startswith("layers.") and int(name.split(".")[1]) >= first)
        }

    def _configure(self, stage: str) -> None:
        import torch

        self.stage = stage
        for p in [*self.thinker.visual.parameters(), *self.thinker.audio_tower.parameters(), *self.head.parameters()]:
            p.requires_grad_(False)
        if stage == "image":
            trainable = [*self.thinker.visual.parameters(), *self.lora.values(), *self.head.parameters()]
        else:
            trainable = [*self.audio_trainable().values(), *self.lora.values(), *self.ctc_head.parameters()]
        for p in trainable:
            p.requires_grad_(True)
        self.trainable = trainable
        self.optimizer = torch.optim.AdamW(trainable, lr=self.config.lr, weight_decay=0.0)

    # -- checkpoints ---------------------------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "stage": self.stage,
            "visual": self.thinker.visual.state_dict(),
            "audio": {k: v.detach() for k, v in self.audio_trainable().items()},
            "lora": {k: v.detach() for k, v in self.lora.items()},
            "head": self.head.state_dict(),
            "ctc_head": self.ctc_head.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "history": self.history,
            "config": asdict(self.config),
            "image_stage_sha256": self.image_stage_sha256,
        }

    def save_checkpoint(self) -> None:
        import torch

        self.work_dir.mkdir(parents=True, exist_ok=True)
        partial = self.work_dir / "checkpoint.pt.partial"
        torch.save(self._state(), partial)
        partial.replace(self.work_dir / "checkpoint.pt")

    def _resume(self) -> bool:
        import torch

        path = self.work_dir / "checkpoint.pt"
        if not path.exists():
            return False
        state = torch.load(path, weights_only=False)
        if state["config"] != asdict(self.config):
            raise RuntimeError(f"{path} was made with other settings; remove it to start again")
        self.thinker.visual.load_state_dict(state["visual"])
        with torch.no_grad():
            for k, v in state["lora"].items():
                self.lora[k].copy_(v)
            audio = self.audio_trainable()
            for k, v in state["audio"].items():
                audio[k].copy_(v)
        self.head.load_state_dict(state["head"])
        self.ctc_head.load_state_dict(state["ctc_head"])
        self._configure(state["stage"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        self.history = list(state["history"])
        self.image_stage_sha256 = state.get("image_stage_sha256")
        self.progress(f"resumed at step {self.step} of {self.config.total_steps} ({self.stage} stage)")
        return True

    def _load_image_stage(self, path: Path) -> None:
        """Starts at stage 2 from exported weights whose stage 1 had this run's settings (the committed file)."""
        from safetensors import safe_open

        manifest = json.loads(path.with_name(MANIFEST_NAME.format(pool=self.config.pool)).read_text())
        stage1 = ("steps", "batch", "lr", "lora_rank", "lora_alpha", "label_weight", "warmup_steps", "seed")
        mine = asdict(self.config)
        if any(manifest["config"].get(k) != mine[k] for k in stage1):
            raise RuntimeError(f"{path} was trained with other image-stage settings than this run's")
        import torch

        with safe_open(str(path), framework="pt") as f, torch.no_grad():
            names = list(f.keys())
            self.thinker.visual.load_state_dict(
                {k.removeprefix("thinker.visual."): f.get_tensor(k) for k in names if k.startswith("thinker.visual.")}
            )
            for k in self.lora:
                self.lora[k].copy_(f.get_tensor(k))
            self.head.load_state_dict(
                {k.removeprefix("label_head."): f.get_tensor(k) for k in names if k.startswith("label_head.")}
            )
        self.step = self.config.steps
        self.image_stage_sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
        self._configure("audio")
        self.progress(f"image stage taken from {path.name}; training the audio stage")

    # -- one step ------------------------------------------------------------------------------------------------

    def media_embeds(self, batch: dict[str, Any]) -> tuple[Any, Any, Any]:
        """(input embeddings with the media scattered in, image embeddings or None, audio embeddings or None)."""
        thinker = self.thinker
        input_ids = batch["input_ids"]
        embeds = thinker.model.embed_tokens(input_ids)
        image_embeds = audio_embeds = None
        if "pixel_values" in batch:
            image_embeds = thinker.visual(batch["pixel_values"], grid_thw=batch["image_grid_thw"]).pooler_output
            mask = (input_ids == thinker.config.image_token_id).unsqueeze(-1)
            embeds = embeds.masked_scatter(mask, image_embeds.to(embeds.dtype))
        if "input_features" in batch:
            audio_embeds = thinker.get_audio_features(
                batch["input_features"], feature_attention_mask=batch["feature_attention_mask"]
            ).last_hidden_state
            mask = (input_ids == thinker.config.audio_token_id).unsqueeze(-1)
            embeds = embeds.masked_scatter(mask, audio_embeds.to(embeds.dtype))
        return embeds, image_embeds, audio_embeds

    def loss(self, batch: dict[str, Any]) -> tuple[Any, dict[str, float]]:
        import torch
        from torch.nn.functional import cross_entropy, ctc_loss, log_softmax

        thinker = self.thinker
        embeds, image_embeds, audio_embeds = self.media_embeds(batch)
        audio_lens = batch["feature_attention_mask"].sum(-1) if "feature_attention_mask" in batch else None
        position_ids, _ = thinker.get_rope_index(
            batch["input_ids"], batch.get("image_grid_thw"), None, batch["attention_mask"], False, audio_lens
        )
        hidden = thinker.model(
            inputs_embeds=embeds, attention_mask=batch["attention_mask"], position_ids=position_ids
        ).last_hidden_state
        targets = batch["labels"][:, 1:]
        where = targets != -100
        # Only answer positions go through lm_head: the next token after each of them is a label.
        lm_loss = cross_entropy(thinker.lm_head(hidden[:, :-1][where]), targets[where])
        total = lm_loss
        stats = {"lm_loss": float(lm_loss.item())}
        if self.stage == "image" and image_embeds is not None:
            label_logits = self.head(image_embeds)
            total = total + self.config.label_weight * cross_entropy(label_logits, batch["cell_labels"])
            with torch.no_grad():
                stats["cell_accuracy"] = (label_logits.argmax(-1) == batch["cell_labels"]).float().mean().item()
        if self.stage == "audio" and audio_embeds is not None:
            _, token_lens = thinker.audio_tower._get_feat_extract_output_lengths(audio_lens)
            pieces = audio_embeds.split(token_lens.tolist())
            log_probs = torch.nn.utils.rnn.pad_sequence(
                [log_softmax(self.ctc_head(p), dim=-1) for p in pieces]
            )  # [T, N, C]
            targets_ctc = batch["ctc_targets"]
            ctc = ctc_loss(
                log_probs,
                torch.cat(targets_ctc),
                token_lens,
                torch.tensor([len(t) for t in targets_ctc]),
                zero_infinity=True,
            )
            total = total + self.config.ctc_weight * ctc
            stats["ctc_loss"] = float(ctc.item())
        return total, stats

    def train(self) -> None:
        import torch

        config = self.config
        started = time.monotonic()
        first = self.step
        while self.step < config.total_steps:
            if config.stage(self.step) != self.stage:
                self.save_checkpoint()
                self._configure(config.stage(self.step))
                self.progress(f"stage 1 done at step {self.step}; training the audio stage")
            stage_start = 0 if self.stage == "image" else config.steps
            stage_steps = config.steps if self.stage == "image" else config.audio_steps
            for group in self.optimizer.param_groups:
                group["lr"] = _lr(self.step - stage_start, config, stage_steps)
            batch = self.batches.next(self.step)
            total, stats = self.loss(batch)
            self.optimizer.zero_grad(set_to_none=True)
            total.backward()
            torch.nn.utils.clip_grad_norm_(self.trainable, 1.0)
            self.optimizer.step()
            self.step += 1
            self.history.append({"step": self.step, **stats})
            per_step = (time.monotonic() - started) / (self.step - first)
            bar = "#" * int(30 * self.step / config.total_steps)
            minutes_left = per_step * (config.total_steps - self.step) / 60
            extra = "  ".join(f"{k.replace('_', ' ')} {v:.3f}" for k, v in stats.items() if k != "lm_loss")
            self.progress(
                f"[{bar:<30}] step {self.step}/{config.total_steps} ({self.stage})  answer loss "
                f"{stats['lm_loss']:.3f}  {extra}  {per_step:.1f} s/step, ~{minutes_left:.0f} min left"
            )
            if self.step % config.checkpoint_every == 0 or self.step == config.total_steps:
                self.save_checkpoint()

    # -- output --------------------------------------------------------------------------------------------------

    def answer(self, item: GoldenItem, max_new_tokens: int = 48) -> str:
        """Greedy answer of the model as it stands (LoRA unmerged), through transformers."""
        import torch

        enc = self.processor(
            text=[prompt_text(item.question, media=item.media_order)],
            images=[item.image()] if item.scene is not None else None,
            audio=[np.asarray(item.audio())] if item.clip is not None else None,
            return_tensors="pt",
        )
        with torch.no_grad():
            out = self.thinker.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
        return str(self.processor.tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True))

    def quick_eval(self, limit: int, mixes: tuple[str, ...] = ("image", "audio", "image+audio")) -> dict[str, Any]:
        """Accuracy on the first `limit` held-out items of each mix, by mix and question kind."""
        items = [i for mix in mixes for i in [i for i in golden_set("heldout") if i.mix == mix][:limit]]
        by_kind: dict[str, list[bool]] = {}
        for n, item in enumerate(items, 1):
            verdict = check_answer(item, self.answer(item))
            by_kind.setdefault(f"{item.mix}/{item.kind}", []).append(bool(verdict.correct))
            if n % 10 == 0:
                self.progress(f"  quick eval {n}/{len(items)}")
        by_mix: dict[str, list[bool]] = {}
        for key, values in by_kind.items():
            by_mix.setdefault(key.split("/")[0], []).extend(values)
        total = [v for vs in by_kind.values() for v in vs]
        return {
            "items": len(total),
            "accuracy": sum(total) / max(1, len(total)),
            "by_mix": {k: sum(v) / len(v) for k, v in sorted(by_mix.items())},
            "by_kind": {k: sum(v) / len(v) for k, v in sorted(by_kind.items())},
        }

    def export(self, out_dir: Path) -> Path:
        """The trained tensors (vision tower as `thinker.visual.*`, the trained part of the audio tower, LoRA,
        label head) and a manifest beside them."""
        from safetensors.torch import save_file

        tensors = {f"thinker.visual.{k}": v.detach().contiguous() for k, v in self.thinker.visual.state_dict().items()}
        if self.step > self.config.steps:
            tensors.update({k: v.detach().contiguous() for k, v in self.audio_trainable().items()})
        tensors.update({k: v.detach().contiguous() for k, v in self.lora.items()})
        tensors.update({f"label_head.{k}": v.detach().contiguous() for k, v in self.head.state_dict().items()})
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / WEIGHTS_NAME.format(pool=self.config.pool)
        names = [f"{shape}:{colour}" for shape in SHAPES for colour in COLOURS]  # label i + 1, as `label_of`
        save_file(tensors, str(path), metadata={"lora_scale": str(self.config.lora_scale), "labels": json.dumps(names)})

        def mean_of(key: str, stage: str) -> float | None:
            values = [h[key] for h in self.history if key in h and self.config.stage(int(h["step"]) - 1) == stage]
            return float(np.mean(values[-50:])) if values else None

        manifest = {
            "config": asdict(self.config),
            "weights_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "image_stage_from_sha256": self.image_stage_sha256,
            "final": self.history[-1] if self.history else None,
            "last_50": {
                "image": {"lm_loss": mean_of("lm_loss", "image"), "cell_accuracy": mean_of("cell_accuracy", "image")},
                "audio": {"lm_loss": mean_of("lm_loss", "audio"), "ctc_loss": mean_of("ctc_loss", "audio")},
            },
        }
        (out_dir / MANIFEST_NAME.format(pool=self.config.pool)).write_text(json.dumps(manifest, indent=2) + "\n")
        return path
