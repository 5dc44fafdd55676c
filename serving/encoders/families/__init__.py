"""Family adapters: one per architecture the gateway can encode for, behind a registry keyed by `architectures`.

A checkpoint whose architecture has no adapter still serves: its engine encodes every medium itself (the generic
path). Nothing else in `serving` names an architecture.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from serving.encoders.families.base import (
    AudioEmbedding,
    AudioFeatures,
    EnginePath,
    FamilyAdapter,
    ImageEmbedding,
    Medium,
)
from serving.encoders.families.qwen2_5_omni import Qwen25OmniAdapter
from serving.encoders.families.qwen2_audio import Qwen2AudioAdapter
from serving.encoders.families.qwen2_vl import Qwen2VLAdapter, Qwen25VLAdapter
from serving.encoders.families.qwen3_omni import Qwen3OmniAdapter
from serving.encoders.families.qwen3_vl import Qwen3VLAdapter, Qwen3VLMoeAdapter

__all__ = [
    "ADAPTERS",
    "AudioEmbedding",
    "AudioFeatures",
    "EncoderPoolsSetting",
    "EnginePath",
    "FamilyAdapter",
    "ImageEmbedding",
    "Medium",
    "architecture_of",
    "checkpoint_architecture",
    "family_for",
    "gateway_family",
]

ADAPTERS: tuple[FamilyAdapter, ...] = (
    Qwen25OmniAdapter(),
    Qwen2VLAdapter(),
    Qwen25VLAdapter(),
    Qwen3VLAdapter(),
    Qwen3VLMoeAdapter(),
    Qwen3OmniAdapter(),
    Qwen2AudioAdapter(),
)
_BY_ARCHITECTURE = {arch: adapter for adapter in ADAPTERS for arch in adapter.architectures}

# A pool's `encoder_pools`: `auto` encodes in the gateway where an adapter exists; `true` requires one.
EncoderPoolsSetting = Literal["auto"] | bool


def architecture_of(hf_config: Any) -> str:
    names = getattr(hf_config, "architectures", None) or []
    return str(names[0]) if names else type(hf_config).__name__


def family_for(architecture: str) -> FamilyAdapter | None:
    """The adapter of an architecture name (a config's `architectures[0]`), or None: the engine encodes."""
    return _BY_ARCHITECTURE.get(architecture)


def checkpoint_architecture(checkpoint: Path) -> str:
    """The architecture a checkpoint folder declares in its config.json, read without loading anything."""
    path = Path(checkpoint) / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the model config {path}: {exc}") from exc
    names = config.get("architectures") or []
    return str(names[0]) if names else str(config.get("model_type", "unknown"))


def gateway_family(pool: str, architecture: str, setting: EncoderPoolsSetting) -> FamilyAdapter | None:
    """The adapter a pool encodes with in the gateway, or None when its engine encodes every medium.

    `true` with no adapter for the architecture is refused, naming both, so that a start-up fails before any engine
    starts rather than serving without the cache an operator asked for.
    """
    if setting is False:
        return None
    adapter = family_for(architecture)
    if adapter is None and setting is True:
        known = ", ".join(sorted(_BY_ARCHITECTURE))
        raise ValueError(
            f"pool '{pool}': encoder_pools is true, but the gateway has no encoder adapter for {architecture} "
            f"(it has them for {known}); set encoder_pools to 'auto' or false to let the engine encode its media"
        )
    return adapter
