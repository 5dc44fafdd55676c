"""Qwen2-Audio: audio only, as embeddings (the audio tower and projector run in the gateway, and a cached clip
skips them entirely) on both paths."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from serving.encoders.families.base import BOTH_PATHS, AudioEmbedding, AudioFeatures, FamilyAdapter


class Qwen2AudioAdapter(FamilyAdapter):
    name = "qwen2-audio"
    architectures = ("Qwen2AudioForConditionalGeneration",)
    audio_paths = BOTH_PATHS
    audio_input = "embeds"
    vision_prefixes = ()

    def build_audio_tower(self, checkpoint: Path, hf_config: Any, dtype: Any) -> Any:
        from torch import nn
        from transformers.models.qwen2_audio.modeling_qwen2_audio import (
            Qwen2AudioEncoder,
            Qwen2AudioMultiModalProjector,
        )

        from serving.encoders.tower_io import checkpoint_tensors

        tower = nn.ModuleDict(
            {
                "audio_tower": Qwen2AudioEncoder._from_config(hf_config.audio_config, dtype=dtype),
                "multi_modal_projector": Qwen2AudioMultiModalProjector(hf_config).to(dtype),
            }
        )
        for prefix in ("model.", ""):
            state = {
                k: v
                for name in ("audio_tower.", "multi_modal_projector.")
                for k, v in _prefixed(checkpoint_tensors(checkpoint, prefix + name), name).items()
            }
            if state:
                missing, _ = tower.load_state_dict(state, strict=False)
                if missing:
                    raise RuntimeError(f"audio tower weights missing from {checkpoint}: {missing[:5]}")
                return tower
        raise RuntimeError(f"no audio tower weights (audio_tower.*) in {checkpoint}")

    def audio_forward(self, tower: Any, features: Any, frames: int) -> Any:
        """[tokens, hidden] for one clip, as vLLM's own audio path computes it: the encoder over the clip's log-mel
        features padded to the tower's 30 s (padded positions masked out), then the projector, cut to the clip's
        output length."""
        import torch

        encoder = tower["audio_tower"]
        dtype = next(encoder.parameters()).dtype
        feat_len, out_len = encoder._get_feat_extract_output_lengths(torch.tensor([frames]))
        positions = (features.shape[-1] - 2) // 2 + 1
        padded = torch.arange(positions)[None, :] >= feat_len[:, None]
        mask = padded.view(1, 1, 1, positions).expand(1, 1, positions, positions).to(dtype)
        mask = mask.masked_fill(mask.bool(), float("-inf"))
        hidden = encoder(features[None].to(dtype), attention_mask=mask).last_hidden_state
        return tower["multi_modal_projector"](hidden)[0, : int(out_len[0])]

    def audio_inputs(self, audios: Sequence[AudioFeatures | AudioEmbedding]) -> dict[str, Any]:
        return {"audio_embeds": [a.embeds for a in audios if isinstance(a, AudioEmbedding)]}

    def field_config(self, tensors: Mapping[str, Any], hf_config: Any) -> Mapping[str, Any]:
        from vllm.model_executor.models.qwen2_audio import _qwen2audio_field_config

        return _qwen2audio_field_config(tensors)  # type: ignore[no-untyped-call]


def _prefixed(state: dict[str, Any], name: str) -> dict[str, Any]:
    return {name + k: v for k, v in state.items()}
