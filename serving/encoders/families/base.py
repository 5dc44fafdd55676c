"""What the gateway knows about one model architecture: its towers, their output width and the engine's fields.

An adapter answers, for one family of checkpoints:
- which towers the gateway can run itself (the vision tower, and where the engine takes them, audio embeddings),
  loaded from the checkpoint's own weights;
- how wide an image embedding is (deepstack levels included);
- the fields the engine takes for encoder outputs, on both paths: the in-process engine's `multi_modal_data`
  and a remote replica's `MultiModalKwargsItem`s (with the model's own field layout);
- which modalities may be encoded in the gateway, on which path. vLLM's parsers decide this per family: the
  chat path of one family may refuse embeddings that its token-in/token-out path takes.

Token counts are not here: the engine's own multimodal processor counts them (serving.encoders.counting).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

EnginePath = Literal["inprocess", "remote"]
Medium = Literal["image", "audio"]
# What the gateway hands the engine for a clip: the tower's log-mel input (the engine runs the tower), or the
# tower's output (the engine skips it).
AudioInput = Literal["features", "embeds"]
BOTH_PATHS: frozenset[str] = frozenset({"inprocess", "remote"})


@dataclass(frozen=True)
class ImageEmbedding:
    embeds: Any  # torch.Tensor [tokens, width], float32
    grid_thw: tuple[int, int, int]

    @property
    def tokens(self) -> int:
        return int(self.embeds.shape[0])


@dataclass(frozen=True)
class AudioFeatures:
    """A clip as the audio tower's input (log-mel), which the engine's tower then encodes."""

    features: Any  # torch.Tensor [mel bins, frames], float32
    frames: int
    tokens: int  # the placeholders the engine gives it (serving.encoders.counting)


@dataclass(frozen=True)
class AudioEmbedding:
    """A clip as the audio tower's (and projector's) output: the engine places it without running a tower."""

    embeds: Any  # torch.Tensor [tokens, hidden], float32
    frames: int

    @property
    def tokens(self) -> int:
        return int(self.embeds.shape[0])


class FamilyAdapter:
    """One architecture family. Subclasses name their architectures and towers; the defaults are the Qwen-VL
    layout that Qwen2-VL, Qwen2.5-VL, Qwen3-VL and both Omni thinkers share for images."""

    name: ClassVar[str]
    architectures: ClassVar[tuple[str, ...]]
    # Where the gateway may encode images and audio (vLLM's parsers take encoder outputs there); elsewhere the engine
    # does.
    image_paths: ClassVar[frozenset[str]] = frozenset()
    audio_paths: ClassVar[frozenset[str]] = frozenset()
    audio_input: ClassVar[AudioInput] = "features"
    # Weight-name prefixes of the vision tower, tried in order: transformers 5 saves `model.visual.*`, older
    # releases `visual.*`.
    vision_prefixes: ClassVar[tuple[str, ...]] = ("model.visual.", "visual.")

    def media_config(self, hf_config: Any) -> Any:
        """The config that holds the towers: an Omni checkpoint's thinker, else the checkpoint's own."""
        return getattr(hf_config, "thinker_config", None) or hf_config

    def vision_config(self, hf_config: Any) -> Any:
        return getattr(self.media_config(hf_config), "vision_config", None)

    def merge_size(self, hf_config: Any) -> int:
        return int(getattr(self.vision_config(hf_config), "spatial_merge_size", 2) or 2)

    def patch_size(self, hf_config: Any) -> int:
        return int(getattr(self.vision_config(hf_config), "patch_size", 14) or 14)

    def embedding_width(self, hf_config: Any) -> int:
        """Columns of one image embedding row, as the engine takes it."""
        vision = self.vision_config(hf_config)
        return int(getattr(vision, "out_hidden_size", 0) or getattr(vision, "hidden_size", 0))

    def encodes(self, medium: Medium, path: EnginePath) -> bool:
        """Whether the gateway may encode `medium` for an engine on `path`."""
        return path in (self.image_paths if medium == "image" else self.audio_paths)

    # The vision tower, in the gateway.

    def vision_tower_class(self) -> Any:
        raise NotImplementedError

    def build_vision_tower(self, hf_config: Any, dtype: Any) -> Any:
        return self.vision_tower_class()._from_config(self.vision_config(hf_config), dtype=dtype)

    def vision_forward(self, tower: Any, pixels: Any, grid_thw: Any) -> Any:
        """[tokens, width] embeddings of a batch of images, as the engine would place them."""
        out = tower(pixels, grid_thw=grid_thw)
        return out.pooler_output if hasattr(out, "pooler_output") else out

    def vision_state(self, checkpoint: Path) -> tuple[str, dict[str, Any]]:
        """(prefix, tensors) of the vision tower in the checkpoint's weights."""
        from serving.encoders.tower_io import checkpoint_tensors

        for prefix in self.vision_prefixes:
            state = checkpoint_tensors(checkpoint, prefix)
            if state:
                return prefix, state
        raise RuntimeError(f"no vision tower weights ({' or '.join(self.vision_prefixes)}*) in {checkpoint}")

    # The audio tower, in the gateway (families whose engine takes audio embeddings).

    def build_audio_tower(self, checkpoint: Path, hf_config: Any, dtype: Any) -> Any:
        raise NotImplementedError(f"{self.name}: the engine runs the audio tower")

    def audio_forward(self, tower: Any, features: Any, frames: int) -> Any:
        raise NotImplementedError(f"{self.name}: the engine runs the audio tower")

    # The engine's fields.

    def image_inputs(self, images: Sequence[ImageEmbedding]) -> dict[str, Any]:
        import torch

        return {
            "image_embeds": torch.cat([e.embeds for e in images]),
            "image_grid_thw": torch.tensor([e.grid_thw for e in images], dtype=torch.long),
        }

    def audio_inputs(self, audios: Sequence[AudioFeatures | AudioEmbedding]) -> dict[str, Any]:
        """The Omni thinkers' log-mel layout: features side by side, with their lengths and mask."""
        import torch

        items = [a for a in audios if isinstance(a, AudioFeatures)]
        lengths = torch.tensor([f.frames for f in items], dtype=torch.long)
        mask = torch.zeros(len(items), int(lengths.max()), dtype=torch.long)
        for i, n in enumerate(lengths.tolist()):
            mask[i, :n] = 1
        return {
            "input_audio_features": torch.cat([f.features for f in items], dim=1),
            "audio_feature_lengths": lengths,
            "feature_attention_mask": mask,
        }

    def field_config(self, tensors: Mapping[str, Any], hf_config: Any) -> Mapping[str, Any]:
        """vLLM's field layout of the model's processor outputs (which tensors split per item, which stay on the
        CPU), for a replica's `MultiModalKwargsItem`s."""
        from vllm.model_executor.models.qwen2_vl import _create_qwen2vl_field_factory

        return _create_qwen2vl_field_factory(self.merge_size(hf_config))(tensors)  # type: ignore[no-untyped-call]
