"""A checkpoint's towers read outside the engine: their tensors, and the audio tower's log-mel input.

The encoder pools (serving.encoders.pools) and the grounding scorer's audio reader (grounding.hearing) load tower
weights straight from a checkpoint's safetensors and compute the audio tower's input as the engine's processor would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def log_mel(extractor: Any, samples: Any, *, cut: bool = True) -> tuple[Any, int]:
    """The audio tower's input for float32 mono samples at the extractor's rate: [mel bins, frames] float32, and
    the clip's frame count. Padded to the extractor's chunk, as the engine's own processor does, then (with `cut`)
    cut to the clip's frames."""
    import torch

    out = extractor(
        samples,
        sampling_rate=int(extractor.sampling_rate),
        return_attention_mask=True,
        padding="max_length",
        return_tensors="pt",
    )
    frames = int(out["attention_mask"].sum())
    features = out["input_features"][0]
    return (features[:, :frames] if cut else features).to(torch.float32).contiguous(), frames


def checkpoint_tensors(checkpoint: Path, prefix: str) -> dict[str, Any]:
    """Every tensor of the checkpoint's top-level safetensors files whose name starts with `prefix`, keyed by the
    rest of its name."""
    from safetensors import safe_open

    state: dict[str, Any] = {}
    for path in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                if key.startswith(prefix):
                    state[key[len(prefix) :]] = f.get_tensor(key)
    return state
