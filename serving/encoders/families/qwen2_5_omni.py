"""Qwen2.5-Omni (its thinker): images as embeddings on both paths, audio as log-mel features (the engine's tower)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from serving.encoders.families.base import BOTH_PATHS, FamilyAdapter


class Qwen25OmniAdapter(FamilyAdapter):
    name = "qwen2.5-omni"
    architectures = ("Qwen2_5OmniForConditionalGeneration", "Qwen2_5OmniModel")
    # vLLM 0.32 takes no audio embeddings for the Omni thinkers: the gateway computes the tower's log-mel input.
    image_paths = BOTH_PATHS
    audio_paths = BOTH_PATHS
    vision_prefixes = ("thinker.visual.",)

    def vision_tower_class(self) -> Any:
        from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniVisionEncoder

        return Qwen2_5OmniVisionEncoder

    def field_config(self, tensors: Mapping[str, Any], hf_config: Any) -> Mapping[str, Any]:
        from vllm.model_executor.models.qwen2_5_omni_thinker import create_qwen2_5_omni_thinker_field_factory

        return create_qwen2_5_omni_thinker_field_factory(self.merge_size(hf_config))(tensors)
