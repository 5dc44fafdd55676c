"""The settings of `tessera models train-demo` (demo.training.trainer): step counts, batch sizes, loss weights and the
learning-rate schedule each stage follows."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from demo.training.curriculum import mix_turns

TRAIN_SEED = 1

# Each stage's place here seeds its random draws (`trainer._rng`), so it never changes; a new stage goes at the end.
STAGES = ("vision", "audio", "joint", "text")
# The order the stages run in, on one step counter.
ORDER = ("vision", "audio", "text", "joint")


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices natively (AVX512-BF16 or AMX)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


@dataclass(frozen=True)
class TrainConfig:
    pool: str = "large"
    vision_steps: int = 1200
    vision_batch: int = 16
    audio_steps: int = 600
    audio_batch: int = 16
    audio_train_layers: int = 3
    # *text* (a pool whose text model is cut from SmolLM2's): the adapter re-fits the cut model to the whole one,
    # whose final hidden states and next-token distributions it learns to reproduce on prose (demo.training.distil)
    text_steps: int = 0
    text_batch: int = 8
    text_length: int = 128  # tokens a window of prose
    # windows of that prose distilled from the teacher in every joint step too, beside the answers, so a cut text
    # model that trains whole on the world's answers keeps the language the text stage gave it
    joint_distil: int = 0
    steps: int = 700  # joint
    batch: int = 8  # media items per joint step
    text_items: int = 1  # text-only items per joint step, answered as the untouched text model answers them
    # whether those turns (and the text stage's chat prose) answer `text_keep.MORE_PROMPTS` too: 96 everyday
    # questions rather than 48
    more_text: bool = False
    lr: float = 1e-3
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj", "o_proj")
    # matrix products under bfloat16 autocast where the CPU does bfloat16 natively (about twice as fast); the
    # weights stay float32. Elsewhere bfloat16 is emulated and a hundred times slower, so it is off.
    bf16: bool = dataclasses.field(default_factory=native_bf16)
    warmup_steps: int = 30
    enlarge_share: float = 0.25  # of vision-stage scenes: one large shape drawn bigger than the world's
    # of vision-stage scenes: a free layout instead (`curriculum.vision_scene`); a pass over free layouts from
    # trained weights (`init`) sets it, with the joint stage's `joint_free_share`, so the world's layouts stay in
    # every batch beside them
    vision_free_share: float = 0.0
    # of the joint stage's scenes that hold one large shape: that shape drawn bigger (`enlarged`), so the adapter
    # reads a shape that fills the frame as one shape, and the merger keeps its other tokens quiet
    joint_enlarge_share: float = 0.75
    # of the joint stage's image items: asked instead about one large shape drawn up to 3 times the world's size
    joint_lone_share: float = 0.0
    # of the joint stage's items with an image: that image redrawn as a free layout (shapes anywhere, up to three
    # times the world's large size; `curriculum.free_layout_item`)
    joint_free_share: float = 0.0
    # of the joint stage's items: asked one of the grounding judge's yes/no questions instead (`verify.verify_item`)
    joint_verify_share: float = 0.0
    # How the joint stage's answer loss averages: over every answer token of a batch (False), or over each item's
    # tokens and then over items (True), so a one-word answer ("Yes.") weighs as much as a twenty-word description.
    # Token-averaged, a batch's verification items were a few per cent of its loss and their decision token less.
    loss_per_item: bool = False
    # A vision-stage shape drawn more than this many times the world's radius for its size speaks its words from
    # every cell it covers, not from its centre alone (`stage_losses.speaks_from_cover`); 0: from its centre alone.
    spread_beyond: float = 0.0
    centre_weight: float = 4.0  # of a shape's centre token's distance from its words' embeddings
    empty_weight: float = 4.0  # of the other image tokens' distance from zero
    token_weight: float = 4.0  # of each audio token's distance from its frame's word (or zero), beside CTC
    # CTC reads an audio token as the word whose embedding lies nearest: log-odds are minus squared distances over
    # this share of a word's squared length, so spoken numbers, whose embeddings lie close together, must land
    # close to their own word and not merely in the numbers' neighbourhood
    ctc_temperature: float = 0.05
    # Share of the audio stage's speech said in another form ("The meeting is moved to ..."; demo.speech
    # SENTENCE_FORMS) with pauses between words; CTC wants only the world's words from it, so the tower learns to
    # pass over the rest. 0: the world's own sentences only.
    audio_variety: float = 0.3
    coordinate_weight: float = 10.0
    stage_loss_weight: float = 1.0  # of the vision and audio stage losses during the joint stage
    # Whether the audio tower's trained layers keep training in the joint stage. They do not: the answer loss pulls
    # their tokens off the words (a tower spelling 84% of training clips exactly fell to 51% within 110 joint steps,
    # its CTC loss beside the answer loss).
    joint_audio: bool = False
    # How many of the vision tower's last blocks train in the joint stage, under the answer loss beside the vision
    # stage loss (0: the merger alone). The blocks decide which cells speak for a shape; the merger cannot.
    joint_vision_blocks: int = 0
    # How often the joint stage sees each question kind, relative to the others: (kind, weight) pairs; a kind left
    # out weighs 1. Items are drawn as before and kept with probability weight / the heaviest weight, so a run that
    # leans on the weak kinds still sees every kind. Empty: every kind equally often.
    kind_weights: tuple[tuple[str, float], ...] = ()
    # The joint stage's mix at each step, in turn (one mix per step keeps a batch's prompts about one length):
    # image, audio and image+audio 3:3:2 by default; `--mix-weights` leans the turns on a weaker medium.
    joint_mix: tuple[str, ...] = ("image", "audio", "image+audio", "image", "audio", "image+audio", "image", "audio")
    threads: int = 2
    seed: int = TRAIN_SEED
    checkpoint_every: int = 50
    # Trained weights (a `<pool>-grounding.safetensors` of an earlier run) to start from instead of the seeded
    # random towers and a zero adapter; empty: train from nothing.
    init: str = ""
    # whether `init`'s audio tower (its trained part) is loaded too; False: it starts from Whisper's own weights
    init_audio: bool = True
    # Another pool's exported weights whose vision tower, audio tower and label head this pool reads its media with,
    # unchanged (`towers_from` of its spec); empty: the towers are this run's own.
    towers: str = ""
    # Whether the vision merger trains in the joint stage (off when the towers are another pool's).
    joint_merger: bool = True
    # Whether the text model's layers train whole (a model cut from SmolLM2's needs more than an adapter) rather
    # than through LoRA; the embeddings and lm_head stay frozen either way.
    text_full: bool = False

    @classmethod
    def for_pool(cls, pool: str) -> TrainConfig:
        """The defaults of `pool`: `small`'s text model is cut from SmolLM2's and its towers are `large`'s, so it
        re-fits the cut (text stage) and learns to answer (joint stage), its text layers training whole."""
        if pool != "small":
            return cls(pool=pool)
        return cls(
            pool=pool,
            vision_steps=0,
            audio_steps=0,
            text_steps=800,
            steps=600,
            joint_distil=2,
            more_text=True,
            # the first run read images worst (45% against 100% for audio): image turns lead, 4:2:2
            joint_mix=mix_turns({"image": 4, "audio": 2, "image+audio": 2}),
            lr=3e-4,
            text_full=True,
            joint_merger=False,
        )

    @property
    def total_steps(self) -> int:
        return self.vision_steps + self.audio_steps + self.text_steps + self.steps

    @property
    def _lengths(self) -> dict[str, int]:
        return {"vision": self.vision_steps, "audio": self.audio_steps, "text": self.text_steps, "joint": self.steps}

    def stage(self, step: int) -> str:
        for stage in ORDER[:-1]:
            first, length = self.stage_span(stage)
            if step < first + length:
                return stage
        return ORDER[-1]

    def stage_span(self, stage: str) -> tuple[int, int]:
        """(first step, number of steps) of `stage`."""
        lengths = self._lengths
        first = sum(lengths[s] for s in ORDER[: ORDER.index(stage)])
        return first, lengths[stage]

    @property
    def lora_scale(self) -> float:
        return self.lora_alpha / self.lora_rank


def learning_rate(step: int, config: TrainConfig, steps: int) -> float:
    """Warm-up, then cosine decay to a tenth, over one stage of `steps` steps (`step` counts from its start)."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, steps - config.warmup_steps)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))
