"""Qwen3-VL, dense and MoE: images as embeddings on both paths, each row the merged token followed by its deepstack
levels (hidden x (1 + len(deepstack_visual_indexes)) wide), as the engine splits them back."""

from __future__ import annotations

from typing import Any

from serving.encoders.families.base import BOTH_PATHS, FamilyAdapter


class Qwen3VLAdapter(FamilyAdapter):
    name = "qwen3-vl"
    architectures = ("Qwen3VLForConditionalGeneration",)
    image_paths = BOTH_PATHS

    def vision_tower_class(self) -> Any:
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

        return Qwen3VLVisionModel

    def embedding_width(self, hf_config: Any) -> int:
        vision = self.vision_config(hf_config)
        levels = len(getattr(vision, "deepstack_visual_indexes", None) or ())
        return int(vision.out_hidden_size) * (1 + levels)

    def vision_forward(self, tower: Any, pixels: Any, grid_thw: Any) -> Any:
        import torch

        out = tower(pixels, grid_thw=grid_thw)
        return torch.cat([out.pooler_output, *out.deepstack_features], dim=1)


class Qwen3VLMoeAdapter(Qwen3VLAdapter):
    name = "qwen3-vl-moe"
    architectures = ("Qwen3VLMoeForConditionalGeneration",)

    def vision_tower_class(self) -> Any:
        from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeVisionModel

        return Qwen3VLMoeVisionModel
