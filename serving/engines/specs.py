"""How a pool's settings become the spec its in-process engine starts with, for every pool kind."""

from __future__ import annotations

from config.settings import CHAT_MAX_MODEL_LEN, PoolSettings
from serving.engines.base import EngineSpec


def engine_spec(pool: PoolSettings, model_path: str, max_images: int, *, mm_embeds: bool = False) -> EngineSpec:
    """`mm_embeds`: the gateway hands this engine encoder outputs (its family adapter says which)."""
    if pool.kind != "chat":
        return EngineSpec(
            model=model_path,
            dtype=pool.dtype,
            max_model_len=pool.max_model_len or 0,  # 0: the checkpoint's own
            kv_cache_bytes=int(pool.kv_cache_gib * (1 << 30)),
            enforce_eager=pool.enforce_eager,
            cpu_threads=pool.cpu_threads,
            max_num_seqs=pool.max_num_seqs,
            limit_mm_per_prompt={"audio": 1} if pool.kind == "transcription" else {},
            enable_prefix_caching=False,  # a pooling model keeps no KV cache; Whisper's cross-attention is per clip
            runner="pooling" if pool.kind == "embedding" else "generate",
        )
    return EngineSpec(
        enable_mm_embeds=mm_embeds,
        model=model_path,
        dtype=pool.dtype,
        max_model_len=pool.max_model_len or CHAT_MAX_MODEL_LEN,
        tensor_parallel_size=pool.tensor_parallel_size,
        gpu_memory_utilization=pool.gpu_memory_utilization,
        kv_cache_bytes=int(pool.kv_cache_gib * (1 << 30)),
        enforce_eager=pool.enforce_eager,
        cpu_threads=pool.cpu_threads,
        max_num_seqs=pool.max_num_seqs,
        limit_mm_per_prompt={"image": max_images, "audio": 1, "video": 0},
    )
