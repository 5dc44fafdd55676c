"""A vLLM general plugin, loaded in every vLLM process of this environment (engine cores, workers, `vllm serve`),
registered through the `vllm.general_plugins` entry point. Two changes to vLLM 0.32:

- Qwen2.5-Omni's `image_embeds` path: vLLM returns precomputed image embeddings as one flat [tokens, hidden] tensor
  instead of one tensor per image, so the engine core asserts ("Expected number of multimodal embeddings to match
  number of input items") and dies on the first request that carries `image_embeds`. The pixel path splits by each
  image's grid; this makes the embeddings path do the same.
- Whisper declares itself transcription-only (`supports_transcription_only`), so its model runner reports the one
  task `transcription` and `vllm serve` registers the token-in/token-out endpoint (`/inference/v1/generate`, which
  needs the task `generate`) for it no more than `/v1/completions`; its `/v1/audio/transcriptions` writes its own
  decoder prompt (language and task tokens an English-only checkpoint never saw). Declared a text generator too,
  a Whisper replica takes the decoder prompt Tessera builds, as the in-process engine does. The engine and its
  decoding are unchanged: only the task list (and so the routes) grows.
"""

from __future__ import annotations

from typing import Any


def register() -> None:
    _split_omni_image_embeds()
    _whisper_generates()


def _split_omni_image_embeds() -> None:
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


def _whisper_generates() -> None:
    from vllm.model_executor.models import whisper

    whisper.WhisperForConditionalGeneration.supports_transcription_only = False
