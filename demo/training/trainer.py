"""`tessera models train-demo`: teach a demo pool's towers to see and hear the synthetic world of demo.world.

Everything trains on the pool's own Qwen2.5-Omni thinker (the checkpoint `build-demo` made), so what vLLM serves is
what trained. The towers are taught to speak the text model's language: their output tokens are pulled onto the
text model's own input embeddings of the words that describe what they see and hear, so the text model reads an
image or a clip almost as it reads words, and a small adapter is enough to answer from them. Three stages run on one
step counter:
1. *vision* (`vision_steps`, towers only, no text model): the vision tower and merger from their seeded random
   start. Each shape's centre token (the merged token whose cell holds its centre) regresses onto the embeddings of
   its colour, kind, size and position words (summed and halved: `WordTargets.shape_vector`); every other token
   regresses onto zero, save the cells a shape drawn `spread_beyond` times the world's size covers. Two auxiliary
   heads read every token: the label head (which shape and colour covers the cell, or none; it is kept, since the
   grounding scorer reads it as the tower's detected content) and a coordinate head (the cell's place in the
   image; training only), which teaches the tower where each token lies in the image.
2. *audio* (`audio_steps`, towers only): the audio tower (Whisper tiny.en's encoder, transplanted by `build-demo`)
   trains its top `audio_train_layers` layers, `ln_post` and its projection with CTC over the world's words (and
   "beep", "silence" and "noise" for the non-speech clips), reading each token as the word whose embedding lies
   nearest (`word_logits`: spoken numbers must land near their own word, whose neighbours are close), while every token
   regresses onto what the best CTC path through the true words puts on its frame: that word's embedding, in the
   form answers write it (" Monday", " Emma", " seven"), or zero between words. A clip then reaches the text model
   as its words, spaced out by empty tokens, rather than as blends the adapter must learn to untangle.
3. *joint* (`steps`): LoRA on every text layer's attention projections (`lora_targets`) learns to answer questions
   from those tokens, on image, audio and image+audio items (one mix per step, the mixes taking turns; `kind_weights`
   may ask some question kinds more often; a lone large shape is sometimes drawn up to 3 times its size), while the
   vision merger (and the tower's last `joint_vision_blocks` blocks, when asked) keeps training under both the
   answer loss and its stage loss. The audio tower stays as its stage left it (`joint_audio`). Each step also
   carries `text_items` text-only turns answered as the untouched text model answered them
   (demo.training.text_keep), so the adapter leaves plain chat as it found it.
A pool whose text model is cut from SmolLM2's (`small`, `TrainConfig.for_pool`) runs a *text* stage before the
joint one (`text_steps`; demo.training.distil): its layers train whole (`text_full`) to reproduce the whole model,
the `teacher`, and it reads media with another pool's towers (`towers`, never trained), exporting its layers alone.
Beside this module in demo.training: the stage losses and word targets (`stage_losses`), what each stage sees
(`curriculum`), the thinker's loading, chat template and LoRA (`thinker`), the settings (`config`), the exported
weights and their manifest (`output`), checkpoints and `init` (`checkpoint`).
Otherwise the text model's own weights stay frozen; `build-demo` merges the LoRA into them. Where the CPU
multiplies bfloat16 natively, matrix products run under bfloat16 autocast (`bf16`), about twice as fast; the weights
and the optimizer stay float32. `init` starts from an earlier run's exported weights instead of from nothing.

Training is seeded and deterministic on one machine: stages 1 and 2 draw scenes and clips from a generator seeded
by (seed, stage, step), stage 3 draws items from `demo.golden.training_items`, never from the held-out seeds,
and torch runs on a fixed number of threads. It checkpoints every `checkpoint_every` steps into its work directory
and resumes from the last checkpoint when run again; a finished run writes `<out>/<pool>-grounding.safetensors`
(vision tower, the trained part of the audio tower, label head, LoRA) plus a JSON manifest.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from demo.golden import MIXES, GoldenItem, training_items
from demo.speech import render_clip
from demo.training.checkpoint import borrow_towers, resume, save_checkpoint, start_from
from demo.training.config import STAGES, TrainConfig, learning_rate
from demo.training.curriculum import enlarged, free_layout_item, lone_shape_item, vision_scene, weighted_items
from demo.training.distil import distil_loss, prose_windows
from demo.training.stage_losses import (
    LABELS,
    WordTargets,
    answer_cross_entropy,
    audio_stage_loss,
    image_stage_loss,
    word_logits,
)
from demo.training.text_keep import own_answers, prompts_of
from demo.training.thinker import AUDIO_PART, install_lora, load_thinker, prompt_text
from demo.training.verify import verify_item
from demo.world import render_scene

Progress = Callable[[str], None]


def _full_precision() -> Any:
    """Autocast off: the processors' own torch arithmetic (Whisper's mel filterbank) must stay float32."""
    import torch

    return torch.autocast("cpu", enabled=False)


def _rng(config: TrainConfig, stage: str, step: int) -> np.random.Generator:
    return np.random.default_rng([config.seed, STAGES.index(stage), step])


class Trainer:
    def __init__(
        self, checkpoint: Path, work_dir: Path, config: TrainConfig, progress: Progress, teacher: Path | None = None
    ) -> None:
        import torch

        torch.set_num_threads(config.threads)
        torch.manual_seed(config.seed)
        self.config = config
        self.progress = progress
        self.work_dir = work_dir
        self.thinker, self.processor = load_thinker(checkpoint)
        depth = len(self.thinker.visual.blocks)
        if config.joint_vision_blocks > depth:
            raise ValueError(f"--joint-vision-blocks {config.joint_vision_blocks}: the vision tower has {depth} blocks")
        for p in self.thinker.parameters():
            p.requires_grad_(False)
        # The whole model a cut text model re-fits to (the text stage), and whose answers the text items are.
        self.teacher = load_thinker(teacher)[0].eval() if teacher is not None else None
        if self.teacher is not None:
            for p in self.teacher.parameters():
                p.requires_grad_(False)
        self.lora = (
            {}
            if config.text_full
            else install_lora(self.thinker.model, config.lora_rank, config.lora_scale, config.seed, config.lora_targets)
        )
        hidden = self.thinker.config.text_config.hidden_size
        self.heads: dict[str, Any] = {
            "label": torch.nn.Linear(hidden, LABELS),
            "coordinates": torch.nn.Linear(hidden, 2),
        }
        self.targets = WordTargets(self.thinker.model.embed_tokens.weight, self.processor.tokenizer)
        self.step = 0
        self.history: list[dict[str, float]] = []
        self.init_sha256: str | None = None
        # Made before any weights are loaded (`init` or a checkpoint): the adapter's update is still zero, so these
        # are the text model's own answers (and a resumed run reads the ones its first run wrote). A run without a
        # joint stage never uses them, so it does not spend minutes making them.
        answers = work_dir / "text_answers.json"
        self.text_items = (
            own_answers(
                self.teacher or self.thinker,
                self.processor,
                answers,
                lambda q: prompt_text(q, media=()),
                progress=progress,
                prompts=prompts_of(config.more_text),
            )
            if config.text_items and (config.steps or config.text_steps)
            else []
        )
        if (config.text_steps or config.joint_distil) and self.teacher is None:
            raise ValueError("the text stage needs a teacher: the whole text model the cut one re-fits to")
        self.prose: Any = None
        self.prose_sha256 = ""
        if config.text_steps or config.joint_distil:
            self.prose, self.prose_sha256 = prose_windows(self.processor.tokenizer, config.text_length, self.text_items)
        if config.init:
            start_from(self, Path(config.init))
        if config.towers:
            borrow_towers(self, Path(config.towers))
        self.configure(config.stage(0))
        resume(self)
        self.items: dict[str, Iterator[GoldenItem]] = {
            mix: weighted_items(
                training_items(config.seed + 1, mixes=(mix,)), config.kind_weights, (config.seed, MIXES.index(mix))
            )
            for mix in set(config.joint_mix)
        }
        for done in range(config.stage_span("joint")[0], max(self.step, config.stage_span("joint")[0])):
            self._joint_items(done)  # a resumed run draws on from where its first run stopped

    # -- what trains in each stage -------------------------------------------------------------------------------

    def text_trainable(self) -> dict[str, Any]:
        """The text model's own parameters that train whole (`text_full`: every layer and the final norm, not the
        embeddings), under their checkpoint names; empty when an adapter trains instead."""
        if not self.config.text_full:
            return {}
        return {
            f"thinker.model.{name}": p
            for name, p in self.thinker.model.named_parameters()
            if name.startswith(("layers.", "norm."))
        }

    def audio_trainable(self) -> dict[str, Any]:
        """The audio tower's parameters training changes, under their checkpoint names."""
        tower = self.thinker.audio_tower
        first = len(tower.layers) - self.config.audio_train_layers
        return {
            f"thinker.audio_tower.{name}": p
            for name, p in tower.named_parameters()
            if name.startswith(("ln_post.", "proj."))
            or (name.startswith("layers.") and int(name.split(".")[1]) >= first)
        }

    def _stage_parameters(self, stage: str) -> list[Any]:
        label, coordinates = self.heads["label"], self.heads["coordinates"]
        if stage == "vision":
            return [*self.thinker.visual.parameters(), *label.parameters(), *coordinates.parameters()]
        if stage == "audio":
            return list(self.audio_trainable().values())
        text = [*self.lora.values(), *self.text_trainable().values()]
        if stage == "text":
            return text
        audio = list(self.audio_trainable().values()) if self.config.joint_audio else []
        visual_blocks = list(self.thinker.visual.blocks)
        blocks = visual_blocks[len(visual_blocks) - self.config.joint_vision_blocks :]
        merger = list(self.thinker.visual.merger.parameters()) if self.config.joint_merger else []
        return [
            *text,
            *merger,
            *[p for block in blocks for p in block.parameters()],
            *audio,
            *label.parameters(),
            *coordinates.parameters(),
        ]

    def configure(self, stage: str) -> None:
        import torch

        self.stage = stage
        everything = [
            *self.thinker.visual.parameters(),
            *self.thinker.audio_tower.parameters(),
            *self.lora.values(),
            *self.text_trainable().values(),
            *self.heads["label"].parameters(),
            *self.heads["coordinates"].parameters(),
        ]
        for p in everything:
            p.requires_grad_(False)
        self.trainable = self._stage_parameters(stage)
        for p in self.trainable:
            p.requires_grad_(True)
        self.optimizer = torch.optim.AdamW(self.trainable, lr=self.config.lr, weight_decay=0.0)

    def fit_audio_length(self) -> None:
        """Scales the audio projection so the tokens it speaks words with are, on average, as long as the text
        model's word embeddings (weights trained under another recipe may speak far louder than a word). Only the
        tokens read as words count: most tokens are the quiet ones between words, and counting them would inflate
        well-fitted weights several times over."""
        import torch

        from demo.speech import sample_clip

        rng = _rng(self.config, "audio", 10**9)  # a step no stage reaches
        with torch.no_grad():
            out, _ = self._audio_tokens(self._audio_inputs([sample_clip(rng) for _ in range(8)]))
            spoken = word_logits(out, self.targets, self.config.ctc_temperature).argmax(-1) != 0
            if int(spoken.sum()) < 8:
                self.progress("  audio tokens left as they are: too few read as words to measure")
                return
            factor = self.targets.norm / float(out[spoken].norm(dim=-1).mean())
            proj = self.thinker.audio_tower.proj
            proj.weight.mul_(factor)
            proj.bias.mul_(factor)
        self.progress(f"  audio tokens scaled by {factor:.3f} to word length")

    # -- batches -------------------------------------------------------------------------------------------------

    def _joint_items(self, step: int) -> list[GoldenItem]:
        """Step `step`'s media items, all of one mix (the mixes take turns, step by step), so a batch holds prompts
        of about one length and little padding; a lone large shape is sometimes drawn bigger (`enlarged`), and a
        share of the image items (`joint_lone_share`) is asked about such a shape instead (`lone_shape_item`)."""
        mix = self.items[self.config.joint_mix[step % len(self.config.joint_mix)]]
        items = [next(mix) for _ in range(self.config.batch)]
        rng = _rng(self.config, "joint", step)
        items = [
            dataclasses.replace(item, scene=enlarged(item.scene, rng))
            if item.scene is not None and rng.random() < self.config.joint_enlarge_share
            else item
            for item in items
        ]
        share = self.config.joint_lone_share
        if share:  # no draws at 0, so runs without it replay as they did
            items = [lone_shape_item(i, rng) if i.mix == "image" and rng.random() < share else i for i in items]
        free, verify = self.config.joint_free_share, self.config.joint_verify_share
        if free:
            items = [free_layout_item(i, rng) if i.scene is not None and rng.random() < free else i for i in items]
        if verify:
            items = [verify_item(i, rng) if rng.random() < verify else i for i in items]
        return items

    def _audio_inputs(self, clips: list[Any]) -> dict[str, Any]:
        with _full_precision():
            enc = self.processor(
                text=[AUDIO_PART] * len(clips), audio=[render_clip(c) for c in clips], padding=True, return_tensors="pt"
            )
        return {"input_features": enc["input_features"], "feature_attention_mask": enc["feature_attention_mask"]}

    def _audio_tokens(self, inputs: dict[str, Any]) -> tuple[Any, Any]:
        audio_lens = inputs["feature_attention_mask"].sum(-1)
        out = self.thinker.get_audio_features(
            inputs["input_features"], feature_attention_mask=inputs["feature_attention_mask"]
        ).last_hidden_state
        _, token_lens = self.thinker.audio_tower._get_feat_extract_output_lengths(audio_lens)
        return out, token_lens

    def encode(self, items: list[GoldenItem]) -> dict[str, Any]:
        """Processor tensors of the items' prompts with their answers, and answer-only labels."""
        images = [item.image() for item in items if item.scene is not None]
        clips = [np.asarray(item.audio()) for item in items if item.clip is not None]
        with _full_precision():
            enc = self.processor(
                text=[prompt_text(item.question, item.answer, item.media_order) for item in items],
                images=images or None,
                audio=clips or None,
                padding=True,
                padding_side="right",
                return_tensors="pt",
            )
        labels = enc["input_ids"].clone()
        labels[enc["attention_mask"] == 0] = -100
        for row, item in enumerate(items):
            prompt = self.processor.tokenizer(prompt_text(item.question, media=item.media_order))["input_ids"]
            media_tokens = sum(
                int((enc["input_ids"][row] == token).sum())
                for token in (self.thinker.config.image_token_id, self.thinker.config.audio_token_id)
            )
            # each media placeholder expands to its tokens, one of which the bare prompt already holds
            labels[row, : len(prompt) + media_tokens - len(item.media_order)] = -100
        return {**enc, "labels": labels}

    # -- one step of each stage ----------------------------------------------------------------------------------

    def vision_loss(self) -> tuple[Any, dict[str, float]]:
        rng = _rng(self.config, "vision", self.step)
        scenes = [
            vision_scene(rng, self.config.enlarge_share, self.config.vision_free_share)
            for _ in range(self.config.vision_batch)
        ]
        with _full_precision():
            enc = self.processor.image_processor(images=[render_scene(s) for s in scenes], return_tensors="pt")
        out = self.thinker.visual(enc["pixel_values"], grid_thw=enc["image_grid_thw"]).pooler_output
        return image_stage_loss(out, scenes, enc["image_grid_thw"], self.targets, self.heads, self.config)

    def audio_loss(self) -> tuple[Any, dict[str, float]]:
        from demo.speech import sample_clip

        rng = _rng(self.config, "audio", self.step)
        clips = [sample_clip(rng, variety=self.config.audio_variety) for _ in range(self.config.audio_batch)]
        out, token_lens = self._audio_tokens(self._audio_inputs(clips))
        return audio_stage_loss(out, token_lens, clips, self.targets, self.config)

    def text_loss(self) -> tuple[Any, dict[str, float]]:
        rng = _rng(self.config, "text", self.step)
        rows = rng.choice(len(self.prose), size=self.config.text_batch, replace=False)
        return distil_loss(self.thinker, self.teacher, self.prose[rows], rng)

    def joint_loss(self) -> tuple[Any, dict[str, float]]:
        thinker = self.thinker
        items = self._joint_items(self.step)
        first_text = self.step * self.config.text_items
        text = [self.text_items[(first_text + k) % len(self.text_items)] for k in range(self.config.text_items)]
        batch = self.encode(items)
        input_ids = batch["input_ids"]
        embeds = thinker.model.embed_tokens(input_ids)
        total = embeds.new_zeros(())
        stats: dict[str, float] = {}
        if text:
            # Text turns run as their own short batch rather than padded to the media prompts' length; the answer
            # losses are weighted by how many turns each batch holds.
            text_batch = self.encode(text)
            text_loss = self._answer_loss(text_batch, thinker.model.embed_tokens(text_batch["input_ids"]))
            total = total + len(text) / (len(text) + len(items)) * text_loss
            stats["text loss"] = float(text_loss.item())
        weight = self.config.stage_loss_weight
        if "pixel_values" in batch:
            image_embeds = thinker.visual(batch["pixel_values"], grid_thw=batch["image_grid_thw"]).pooler_output
            mask = (input_ids == thinker.config.image_token_id).unsqueeze(-1)
            embeds = embeds.masked_scatter(mask, image_embeds.to(embeds.dtype))
            scenes = [item.scene for item in items if item.scene is not None]
            loss, image_stats = image_stage_loss(
                image_embeds, scenes, batch["image_grid_thw"], self.targets, self.heads, self.config
            )
            total = total + weight * loss
            stats["cell accuracy"] = image_stats["cell accuracy"]
        audio_lens = None
        if "input_features" in batch:
            audio_embeds, token_lens = self._audio_tokens(batch)
            audio_lens = batch["feature_attention_mask"].sum(-1)
            mask = (input_ids == thinker.config.audio_token_id).unsqueeze(-1)
            embeds = embeds.masked_scatter(mask, audio_embeds.to(embeds.dtype))
            clips = [item.clip for item in items if item.clip is not None]
            loss, audio_stats = audio_stage_loss(audio_embeds, token_lens, clips, self.targets, self.config)
            if self.config.joint_audio:
                total = total + weight * loss
            stats["clip accuracy"] = audio_stats["clip accuracy"]
        lm_loss = self._answer_loss(batch, embeds, audio_lens)
        total = total + len(items) / (len(text) + len(items)) * lm_loss
        if self.config.joint_distil:
            rng = np.random.default_rng([self.config.seed, len(STAGES), self.step])  # a stream no stage draws from
            rows = rng.choice(len(self.prose), size=self.config.joint_distil, replace=False)
            distil, distil_stats = distil_loss(self.thinker, self.teacher, self.prose[rows], rng)
            total = total + distil
            stats["distil kl"] = distil_stats["kl"]
        return total, {"answer loss": float(lm_loss.item()), **stats}

    def _answer_loss(self, batch: dict[str, Any], embeds: Any, audio_lens: Any = None) -> Any:
        """Cross-entropy of the answers in `batch` (prompts embedded as `embeds`)."""
        input_ids = batch["input_ids"]
        position_ids, _ = self.thinker.get_rope_index(
            input_ids, batch.get("image_grid_thw"), None, batch["attention_mask"], False, audio_lens
        )
        hidden = self.thinker.model(
            inputs_embeds=embeds, attention_mask=batch["attention_mask"], position_ids=position_ids
        ).last_hidden_state
        targets = batch["labels"][:, 1:]
        where = targets != -100
        # Only answer positions go through lm_head: the next token after each of them is a label.
        logits = self.thinker.lm_head(hidden[:, :-1][where])
        return answer_cross_entropy(logits, targets, where, per_item=self.config.loss_per_item)

    def train(self) -> None:
        import torch

        config = self.config
        started = time.monotonic()
        first = self.step
        while self.step < config.total_steps:
            if config.stage(self.step) != self.stage:
                save_checkpoint(self)
                self.configure(config.stage(self.step))
                self.progress(f"{self.stage} stage from step {self.step}")
            stage_start, stage_steps = config.stage_span(self.stage)
            for group in self.optimizer.param_groups:
                group["lr"] = learning_rate(self.step - stage_start, config, stage_steps)
            losses = {
                "vision": self.vision_loss,
                "audio": self.audio_loss,
                "text": self.text_loss,
                "joint": self.joint_loss,
            }
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=config.bf16):
                total, stats = losses[self.stage]()
            self.optimizer.zero_grad(set_to_none=True)
            total.backward()
            torch.nn.utils.clip_grad_norm_(self.trainable, 1.0)
            self.optimizer.step()
            self.step += 1
            self.history.append({"step": self.step, "loss": float(total.item()), **stats})
            per_step = (time.monotonic() - started) / (self.step - first)
            bar = "#" * int(30 * self.step / config.total_steps)
            recent = self.history[-20:]
            shown = "  ".join(f"{k} {np.mean([h[k] for h in recent if k in h]):.3f}" for k in stats)
            self.progress(
                f"[{bar:<30}] step {self.step}/{config.total_steps} ({self.stage})  loss {float(total.item()):.3f}"
                f"  {shown}  {per_step:.1f} s/step"
            )
            if self.step % config.checkpoint_every == 0 or self.step == config.total_steps:
                save_checkpoint(self)
