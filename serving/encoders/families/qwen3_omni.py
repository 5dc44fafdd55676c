"""The Qwen3-Omni-MoE thinker: audio as log-mel features on both paths; images as deepstack embeddings only to a
remote replica, since vLLM 0.32's chat-path parser for this model takes no image embeddings (its token-in/token-out
path does), so an in-process engine encodes images itself."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from serving.encoders.families.qwen3_vl import Qwen3VLAdapter


class Qwen3OmniAdapter(Qwen3VLAdapter):
    name = "qwen3-omni-moe"
    architectures = ("Qwen3OmniMoeForConditionalGeneration",)
    image_paths = frozenset({"remote"})
    audio_paths = frozenset({"inprocess", "remote"})
    vision_prefixes = ("thinker.visual.",)

    def vision_tower_class(self) -> Any:
        from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeVisionEncoder

        return Qwen3OmniMoeVisionEncoder

    def field_config(self, tensors: Mapping[str, Any], hf_config: Any) -> Mapping[str, Any]:
        from vllm.model_executor.models.qwen2_5_omni_thinker import create_qwen2_5_omni_thinker_field_factory

        return create_qwen2_5_omni_thinker_field_factory(self.merge_size(hf_config))(tensors)
