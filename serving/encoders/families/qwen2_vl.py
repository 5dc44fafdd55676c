"""Qwen2-VL and Qwen2.5-VL: images only, as embeddings on both paths."""

from __future__ import annotations

from typing import Any

from serving.encoders.families.base import BOTH_PATHS, FamilyAdapter


class Qwen2VLAdapter(FamilyAdapter):
    name = "qwen2-vl"
    architectures = ("Qwen2VLForConditionalGeneration",)
    image_paths = BOTH_PATHS

    def vision_tower_class(self) -> Any:
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VisionTransformerPretrainedModel

        return Qwen2VisionTransformerPretrainedModel

    def embedding_width(self, hf_config: Any) -> int:
        # Qwen2-VL's merger projects to the text model's width (its vision `hidden_size` is the output width).
        vision = self.vision_config(hf_config)
        text = getattr(hf_config, "text_config", hf_config)
        return int(getattr(vision, "hidden_size", 0) or getattr(text, "hidden_size", 0))


class Qwen25VLAdapter(FamilyAdapter):
    name = "qwen2.5-vl"
    architectures = ("Qwen2_5_VLForConditionalGeneration",)
    image_paths = BOTH_PATHS

    def vision_tower_class(self) -> Any:
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

        return Qwen2_5_VisionTransformerPretrainedModel
