"""The configs and processors of the tiny family checkpoints (demo.family_checkpoints builds them): one small,
real-architecture shape per family, with the fields vLLM 0.32 reads that the config classes do not declare."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TokenIds = dict[str, int]

# The text model of every family: 2 layers, 128 wide, 2 query heads of 64 sharing 1 key/value head.
TEXT_HIDDEN = 128
HEAD_DIM = 64
TEXT = {
    "hidden_size": TEXT_HIDDEN,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": TEXT_HIDDEN // HEAD_DIM,
    "num_key_value_heads": 1,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}
# Multimodal rope: the temporal, height and width sections sum to HEAD_DIM / 2.
MROPE_SECTION = [8, 12, 12]
# The Qwen3-VL-MoE and Qwen3-Omni-MoE text models' experts: 2 x 96 is neither the text width nor half of it, so
# which way a fused expert tensor lies is never ambiguous. transformers always renormalises the top-k routing weights
# of Qwen3-VL-MoE and its config has no `norm_topk_prob`, which vLLM's Qwen3-MoE layers read: say so.
MOE = {
    "moe_intermediate_size": 96,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "decoder_sparse_step": 1,
    "norm_topk_prob": True,
}
# Image processor bounds: a 224x224 image stays 224x224.
MIN_PIXELS = 56 * 56
MAX_PIXELS = 224 * 224
MEL_BINS = 128
# Every family's audio tower: 2 layers 64 wide with one head.
AUDIO_TOWER = {
    "num_mel_bins": MEL_BINS,
    "encoder_layers": 2,
    "encoder_attention_heads": 1,
    "encoder_ffn_dim": 128,
    "d_model": 64,
}


def _text_config(ids: TokenIds, vocab_size: int, *, mrope: bool = True, interleaved: bool = False) -> dict[str, Any]:
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": 1000000.0}
    if mrope:
        rope["mrope_section"] = MROPE_SECTION
    if interleaved:
        rope["mrope_interleaved"] = True
    return TEXT | {
        "vocab_size": vocab_size,
        "rope_parameters": rope,
        "bos_token_id": ids["endoftext"],
        "eos_token_id": ids["im_end"],
        "pad_token_id": ids["endoftext"],
    }


def _vision_ids(ids: TokenIds) -> dict[str, int]:
    return {
        "image_token_id": ids["image_token"],
        "video_token_id": ids["video_token"],
        "vision_start_token_id": ids["vision_start_token"],
        "vision_end_token_id": ids["vision_end_token"],
    }


def _qwen3_vision(**extra: Any) -> dict[str, Any]:
    """Qwen3-VL's tower (also Qwen3-Omni's): patch 16, merge 2, one deepstack layer (embeddings 2 x 128 wide)."""
    return {
        "depth": 2,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 1,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "out_hidden_size": TEXT_HIDDEN,
        "num_position_embeddings": 24 * 24,
        "deepstack_visual_indexes": [0],
    } | extra


def _qwen2_vl_config(ids: TokenIds, vocab_size: int) -> Any:
    from transformers import Qwen2VLConfig

    vision = {"depth": 2, "embed_dim": 64, "hidden_size": TEXT_HIDDEN, "mlp_ratio": 2, "num_heads": 1}
    return Qwen2VLConfig(text_config=_text_config(ids, vocab_size), vision_config=vision, **_vision_ids(ids))


def _qwen2_5_vl_config(ids: TokenIds, vocab_size: int) -> Any:
    from transformers import Qwen2_5_VLConfig

    vision = {
        "depth": 2,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 1,
        "out_hidden_size": TEXT_HIDDEN,
        "window_size": 112,
        "fullatt_block_indexes": [1],
    }
    return Qwen2_5_VLConfig(text_config=_text_config(ids, vocab_size), vision_config=vision, **_vision_ids(ids))


def _qwen3_vl_config(ids: TokenIds, vocab_size: int) -> Any:
    from transformers import Qwen3VLConfig

    text = _text_config(ids, vocab_size, interleaved=True) | {"head_dim": HEAD_DIM}
    return Qwen3VLConfig(text_config=text, vision_config=_qwen3_vision(), **_vision_ids(ids))


def _qwen3_vl_moe_config(ids: TokenIds, vocab_size: int) -> Any:
    from transformers import Qwen3VLMoeConfig

    text = _text_config(ids, vocab_size, interleaved=True) | {"head_dim": HEAD_DIM} | MOE
    return Qwen3VLMoeConfig(text_config=text, vision_config=_qwen3_vision(), **_vision_ids(ids))


def _qwen3_omni_moe_config(ids: TokenIds, vocab_size: int) -> Any:
    from transformers import Qwen3OmniMoeConfig

    text = _text_config(ids, vocab_size, interleaved=True) | {"head_dim": HEAD_DIM} | MOE
    audio = AUDIO_TOWER | {"output_dim": TEXT_HIDDEN, "downsample_hidden_size": 32}
    thinker = {
        "text_config": text,
        # vLLM's Qwen3-Omni tower reads these, as the published config.json has them: the position grid's side in
        # pixels (24 patches of 16, num_position_embeddings 576) and learnt absolute positions.
        "vision_config": _qwen3_vision(image_size=24 * 16, apply_vit_abs_pos_embed=True),
        "audio_config": audio,
        "image_token_id": ids["image_token"],
        "video_token_id": ids["video_token"],
        "audio_token_id": ids["audio_token"],
        "audio_start_token_id": ids["audio_bos_token"],
        # Not declared fields, but vLLM's and transformers' position code read them.
        "audio_end_token_id": ids["audio_eos_token"],
        "vision_start_token_id": ids["vision_bos_token"],
        "vision_end_token_id": ids["vision_eos_token"],
        "user_token_id": ids["user"],
    }
    return Qwen3OmniMoeConfig(
        thinker_config=thinker,
        enable_audio_output=False,
        im_start_token_id=ids["im_start"],
        im_end_token_id=ids["im_end"],
        system_token_id=ids["system"],
        user_token_id=ids["user"],
        assistant_token_id=ids["assistant"],
    )


def _qwen2_audio_config(ids: TokenIds, vocab_size: int) -> Any:
    from transformers import Qwen2AudioConfig

    audio = dict(AUDIO_TOWER)
    text = _text_config(ids, vocab_size, mrope=False) | {"model_type": "qwen2"}
    return Qwen2AudioConfig(audio_config=audio, text_config=text, audio_token_index=ids["audio_token"])


def _qwen2_text_config(ids: TokenIds, vocab_size: int) -> Any:
    from transformers import Qwen2Config

    return Qwen2Config(**_text_config(ids, vocab_size, mrope=False))


CONFIG_BUILDERS: dict[str, Callable[[TokenIds, int], Any]] = {
    "qwen2_vl": _qwen2_vl_config,
    "qwen2_5_vl": _qwen2_5_vl_config,
    "qwen3_vl": _qwen3_vl_config,
    "qwen3_vl_moe": _qwen3_vl_moe_config,
    "qwen3_omni_moe": _qwen3_omni_moe_config,
    "qwen2_audio": _qwen2_audio_config,
    "qwen2_text": _qwen2_text_config,
}


# --- processors ----------------------------------------------------------------------------------------------------


def _qwen2_image_and_video(patch_size: int = 14, **extra: Any) -> dict[str, Any]:
    from transformers import Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    bounds = {"min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS, "patch_size": patch_size} | extra
    return {"image_processor": Qwen2VLImageProcessor(**bounds), "video_processor": Qwen2VLVideoProcessor(**bounds)}


def _qwen3_image_and_video() -> dict[str, Any]:
    from transformers import Qwen2VLImageProcessor, Qwen3VLVideoProcessor

    half = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
    image = Qwen2VLImageProcessor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, patch_size=16, **half)
    video = Qwen3VLVideoProcessor(size={"shortest_edge": MIN_PIXELS, "longest_edge": 8 * MAX_PIXELS}, **half)
    return {"image_processor": image, "video_processor": video}


def _feature_extractor() -> Any:
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=MEL_BINS)


def _qwen2_vl_processor(tokenizer: Any) -> Any:
    from transformers import Qwen2VLProcessor

    return Qwen2VLProcessor(tokenizer=tokenizer, chat_template=tokenizer.chat_template, **_qwen2_image_and_video())


def _qwen2_5_vl_processor(tokenizer: Any) -> Any:
    from transformers import Qwen2_5_VLProcessor

    return Qwen2_5_VLProcessor(tokenizer=tokenizer, chat_template=tokenizer.chat_template, **_qwen2_image_and_video())


def _qwen3_vl_processor(tokenizer: Any) -> Any:
    from transformers import Qwen3VLProcessor

    return Qwen3VLProcessor(tokenizer=tokenizer, chat_template=tokenizer.chat_template, **_qwen3_image_and_video())


def _qwen3_omni_processor(tokenizer: Any) -> Any:
    from transformers import Qwen3OmniMoeProcessor

    media = _qwen2_image_and_video(patch_size=16, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    return Qwen3OmniMoeProcessor(
        tokenizer=tokenizer, feature_extractor=_feature_extractor(), chat_template=tokenizer.chat_template, **media
    )


def _qwen2_audio_processor(tokenizer: Any) -> Any:
    from transformers import Qwen2AudioProcessor

    return Qwen2AudioProcessor(
        feature_extractor=_feature_extractor(), tokenizer=tokenizer, chat_template=tokenizer.chat_template
    )


PROCESSOR_BUILDERS: dict[str, Callable[[Any], Any]] = {
    "qwen2_vl": _qwen2_vl_processor,
    "qwen2_5_vl": _qwen2_5_vl_processor,
    "qwen3_vl": _qwen3_vl_processor,
    "qwen3_vl_moe": _qwen3_vl_processor,
    "qwen3_omni_moe": _qwen3_omni_processor,
    "qwen2_audio": _qwen2_audio_processor,
}
