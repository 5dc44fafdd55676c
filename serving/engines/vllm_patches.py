"""A vLLM general plugin, loaded in every engine process: fixes vLLM 0.32's Qwen2.5-Omni `image_embeds` path.

vLLM 0.32 returns precomputed image embeddings as one flat [tokens, hidden] tensor instead of one tensor per
image, so the engine core asserts ("Expected number of multimodal embeddings to match number of input
items") and dies on the first request that carries `image_embeds`. The pixel path splits by each image's
grid; this makes the embeddings path do the same. Registered through the `vllm.general_plugins` entry point.
"""

from __future__ import annotations

from typing import Any


def register() -> None:
    from vllm.model_executor.models import qwen2_5_omni_thinker as thinker

    mixin = thinker.Qwen2_5OmniConditionalGenerationMixin
    original = mixin._process_image_input
    if getattr(original, "_tessera_split_embeds", False):
        return

    def _process_image_input(self: Any, image_input: Any) -> Any:
        if image_input["type"] != "image_embeds":
            return original(self, image_input)
        embeds = image_input["image_embeds"].type(self.visual.dtype)
        merge = self.visual.spatial_merge_size
        sizes = (image_input["image_grid_thw"].prod(-1) // merge // merge).tolist()
        return embeds.split(sizes)

    _process_image_input._tessera_split_embeds = True  # type: ignore[attr-defined]
    mixin._process_image_input = _process_image_input  # type: ignore[method-assign]
