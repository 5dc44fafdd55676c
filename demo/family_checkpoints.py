"""Tiny random-weight checkpoints of other Qwen model families, built offline for tests.

This module owns the family builders: for each name in `FAMILIES` a seeded, real-architecture checkpoint (2 text
layers 128 wide with heads of 64, tiny vision and audio towers) that vLLM registers under its own architecture name,
with a byte-level BPE tokenizer of a few hundred tokens trained here on a built-in text, the family's special tokens
and HF processor, and a ChatML chat template that renders image, video and audio parts as the family's markers. The
demo's own Qwen2.5-Omni checkpoints are demo.checkpoints'.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from demo.family_configs import CONFIG_BUILDERS, PROCESSOR_BUILDERS, TokenIds

# Bumping this rebuilds every family checkpoint on its next use.
BUILDER_VERSION = 2  # 2: the tokenizer splits words as Qwen2's does (AutoTokenizer's Qwen2Tokenizer agrees)
MANIFEST_NAME = "tessera-family.json"

FAMILIES: tuple[str, ...] = (
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
    "qwen3_vl_moe",
    "qwen3_omni_moe",
    "qwen2_audio",
    "qwen2_text",
)

VOCAB_MULTIPLE = 64
BPE_VOCAB = 512

CHATML_TOKENS = {"endoftext": "<|endoftext|>", "im_start": "<|im_start|>", "im_end": "<|im_end|>"}
# Marker names as the Qwen2-VL, Qwen2.5-VL and Qwen3-VL processors and vLLM's placeholders spell them.
VISION_TOKENS = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "vision_start_token": "<|vision_start|>",
    "vision_end_token": "<|vision_end|>",
}
# Qwen3-Omni's tokenizer names its markers itself; its processor reads these attributes.
OMNI_TOKENS = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "audio_token": "<|audio_pad|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
}
AUDIO_TOKENS = {"audio_token": "<|AUDIO|>", "audio_bos_token": "<|audio_bos|>", "audio_eos_token": "<|audio_eos|>"}

Markers = dict[tuple[str, ...], str]
VISION_MARKERS: Markers = {
    ("image", "image_url", "image_embeds"): "<|vision_start|><|image_pad|><|vision_end|>",
    ("video", "video_url"): "<|vision_start|><|video_pad|><|vision_end|>",
}
OMNI_MARKERS: Markers = VISION_MARKERS | {
    ("audio", "audio_url", "input_audio"): "<|audio_start|><|audio_pad|><|audio_end|>"
}
AUDIO_MARKERS: Markers = {("audio", "audio_url", "input_audio"): "<|audio_bos|><|AUDIO|><|audio_eos|>"}

# The text the tokenizer's merges are learnt from: plain English, with the chat roles (as ChatML writes them, at the
# start of a line) whole words.
CORPUS = """\
system
user
assistant
user
assistant
system
You are a helpful assistant. Describe the image. What is in this picture? What does the speaker say?
The quick brown fox jumps over the lazy dog. A red square, a blue circle and a green triangle lie on a white table.
Transcribe the audio clip. The weather today is sunny with a light breeze from the west, and the evening will be cool.
Please answer in one short sentence. There are three shapes in the image: two circles and one star.
Count the objects, name their colours, and tell me where each one is. The cat sat on the mat near the door.
Once upon a time there was a small town by the sea where the people worked, sang, read books and told stories.
Numbers: zero one two three four five six seven eight nine ten 0 1 2 3 4 5 6 7 8 9 10 100 2024.
"""


@dataclass(frozen=True)
class Family:
    """What one family's checkpoint is: the model and processor classes, its markers and how its config reads."""

    name: str
    architecture: str  # the class vLLM registers, and transformers' class that writes the weights
    seed: int
    media_tokens: dict[str, str] = field(default_factory=dict)
    markers: Markers = field(default_factory=dict)
    # Where transformers' save_pretrained strays from the family's published layout, which vLLM loads: (module
    # prefix, saved prefix) pairs the weights are written with instead, and whether the fused expert tensors are
    # saved as [experts, in, out] (transformers 5.19 writes its own [experts, out, in]).
    weight_prefixes: tuple[tuple[str, str], ...] = ()
    experts_in_out: bool = False

    @property
    def rewrites_weights(self) -> bool:
        return bool(self.weight_prefixes) or self.experts_in_out


FAMILY_SPECS: dict[str, Family] = {
    spec.name: spec
    for spec in (
        Family("qwen2_vl", "Qwen2VLForConditionalGeneration", 21, VISION_TOKENS, VISION_MARKERS),
        Family("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", 25, VISION_TOKENS, VISION_MARKERS),
        Family("qwen3_vl", "Qwen3VLForConditionalGeneration", 30, VISION_TOKENS, VISION_MARKERS),
        Family(
            "qwen3_vl_moe",
            "Qwen3VLMoeForConditionalGeneration",
            31,
            VISION_TOKENS,
            VISION_MARKERS,
            experts_in_out=True,
        ),
        Family("qwen3_omni_moe", "Qwen3OmniMoeForConditionalGeneration", 32, OMNI_TOKENS, OMNI_MARKERS),
        Family(
            "qwen2_audio",
            "Qwen2AudioForConditionalGeneration",
            20,
            AUDIO_TOKENS,
            AUDIO_MARKERS,
            # transformers 5.19 saves the text model as `language_model.model.model.*`, which vLLM can't load.
            weight_prefixes=(
                ("model.language_model.", "language_model.model."),
                ("lm_head.", "language_model.lm_head."),
                ("model.audio_tower.", "audio_tower."),
                ("model.multi_modal_projector.", "multi_modal_projector."),
            ),
        ),
        Family("qwen2_text", "Qwen2ForCausalLM", 2),
    )
}


def build_family_checkpoint(family: str, path: Path, *, force: bool = False) -> Path:
    """Builds (if missing or stale) a tiny checkpoint of `family` in `path`; returns path."""
    if family not in FAMILY_SPECS:
        raise ValueError(f"unknown family {family!r}; known: {list(FAMILIES)}")
    if not force and family_checkpoint_ready(path, family):
        return path
    staging = path.with_name(path.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    _write_checkpoint(FAMILY_SPECS[family], staging)
    shutil.rmtree(path, ignore_errors=True)
    staging.rename(path)
    return path


def family_checkpoint_ready(path: Path, family: str) -> bool:
    """Whether `path` holds `family`'s checkpoint as this builder version writes it."""
    try:
        manifest = json.loads((path / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("builder_version") == BUILDER_VERSION and manifest.get("family") == family


def _write_checkpoint(spec: Family, staging: Path) -> None:
    import torch
    import transformers

    tokenizer = build_tokenizer(spec)
    ids = _token_ids(tokenizer, spec)
    config = CONFIG_BUILDERS[spec.name](ids, -(-len(tokenizer) // VOCAB_MULTIPLE) * VOCAB_MULTIPLE)
    config.architectures = [spec.architecture]
    config.dtype = "float32"
    torch.manual_seed(spec.seed)
    model = getattr(transformers, spec.architecture)._from_config(config, dtype=torch.float32)
    model.save_pretrained(staging)
    if spec.rewrites_weights:
        _rewrite_weights(model, staging, spec)
    builder = PROCESSOR_BUILDERS.get(spec.name)
    (builder(tokenizer) if builder is not None else tokenizer).save_pretrained(staging)
    weights = sorted(staging.glob("*.safetensors"))
    manifest = {
        "builder_version": BUILDER_VERSION,
        "family": spec.name,
        "architecture": spec.architecture,
        "seed": spec.seed,
        "parameters": sum(p.numel() for p in model.parameters()),
        "token_ids": ids,
        "weights_sha256": {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in weights},
    }
    (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")


def _rewrite_weights(model: Any, staging: Path, spec: Family) -> None:
    """Writes the model's weights again as one file, in the layout of the family's published checkpoints."""
    from safetensors.torch import save_file

    def renamed(name: str) -> str:
        for old, new in spec.weight_prefixes:
            if name.startswith(old):
                return new + name[len(old) :]
        if spec.weight_prefixes:
            raise ValueError(f"weight {name} has none of the prefixes {spec.weight_prefixes}")
        return name

    def laid_out(name: str, tensor: Any) -> Any:
        fused_expert = spec.experts_in_out and ".mlp.experts." in name and tensor.dim() == 3
        return (tensor.transpose(1, 2) if fused_expert else tensor).contiguous()

    for old_file in staging.glob("model*.safetensors*"):
        old_file.unlink()
    state = {renamed(name): laid_out(name, tensor) for name, tensor in model.state_dict().items()}
    save_file(state, str(staging / "model.safetensors"), metadata={"format": "pt"})


# --- tokenizer and chat template -------------------------------------------------------------------------------------


def build_tokenizer(spec: Family) -> Any:
    """A byte-level BPE tokenizer (any text encodes) with ChatML's and the family's special tokens first. It splits
    words as Qwen2's tokenizer does, so transformers' Qwen2Tokenizer (which AutoTokenizer picks for `qwen2` models)
    encodes exactly as it does."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    specials = list(dict.fromkeys([*CHATML_TOKENS.values(), *spec.media_tokens.values()]))
    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=CHATML_TOKENS["im_end"],
        pad_token=CHATML_TOKENS["endoftext"],
        additional_special_tokens=specials[len(CHATML_TOKENS) :],
        model_max_length=32768,
    )
    if spec.media_tokens:
        # Named model-specific tokens go to tokenizer_config.json, where the family's processor looks them up.
        tokenizer._set_model_specific_special_tokens(special_tokens=spec.media_tokens)
    tokenizer.chat_template = chat_template(spec.markers)
    return tokenizer


def chat_template(markers: Markers) -> str:
    """ChatML with no default system turn: string content as is, content parts as text or the family's markers."""
    branches = "".join(
        f"{{%- elif part['type'] in {list(types)!r} -%}}{{{{ '{marker}' }}}}" for types, marker in markers.items()
    )
    return (
        "{%- for message in messages -%}"
        "{{ '<|im_start|>' + message['role'] + '\\n' }}"
        "{%- if message['content'] is string -%}{{ message['content'] }}"
        "{%- elif message['content'] is not none -%}{%- for part in message['content'] -%}"
        "{%- if part['type'] == 'text' -%}{{ part['text'] }}" + branches + "{%- endif -%}{%- endfor -%}{%- endif -%}"
        "{{ '<|im_end|>\\n' }}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
    )


def _token_ids(tokenizer: Any, spec: Family) -> TokenIds:
    names = CHATML_TOKENS | spec.media_tokens
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in names.items()}
    for role in ("system", "user", "assistant"):
        (ids[role],) = tokenizer.encode(role, add_special_tokens=False)
    return ids


# --- configs -------------------------------------------------------------------------------------------------------
