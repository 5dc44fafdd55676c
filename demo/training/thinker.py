"""The demo pools' Qwen2.5-Omni thinker as training and its checks hold it: loaded from a checkpoint in float32, the
served chat template's rendering of a turn, and the LoRA adapter wrapped around the text model's attention."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"  # the served template's
IMAGE_PART = "<|vision_start|><|IMAGE|><|vision_end|>"
AUDIO_PART = "<|audio_bos|><|AUDIO|><|audio_eos|>"
MEDIA_PART = {"image": IMAGE_PART, "audio": AUDIO_PART}


def prompt_text(question: str, answer: str | None = None, media: tuple[str, ...] = ("image",)) -> str:
    """The served chat template's rendering of one user turn (the media in order, then the question)."""
    parts = "".join(MEDIA_PART[m] for m in media)
    text = (
        f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{parts}{question}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    return text if answer is None else text + answer + "<|im_end|>"


def install_lora(
    text_model: Any, rank: int, scale: float, seed: int, targets: tuple[str, ...] = ("q_proj", "v_proj")
) -> dict[str, Any]:
    """Wraps the `targets` projections of every layer's attention with a low-rank update; returns the trainable
    parameters by name."""
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
        for name in targets:
            wrapped = _LoRA(getattr(layer.self_attn, name))
            setattr(layer.self_attn, name, wrapped)
            params[f"lora.{i}.{name}.a"] = wrapped.lora_a
            params[f"lora.{i}.{name}.b"] = wrapped.lora_b
    return params


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
