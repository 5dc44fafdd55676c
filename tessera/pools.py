"""The model pools the state starts: each pool's checkpoint (its own `model` path, or one the command line's
resolver provides), its engine (in-process vLLM, or remote replicas), its encoder pools and its admission."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from config.settings import PoolSettings, Settings
from grounding.models import checkpoint_judge_thresholds
from serving.admission import AdmissionController
from serving.encoders.counting import MediaTokenCounter
from serving.encoders.families import (
    EnginePath,
    FamilyAdapter,
    architecture_of,
    checkpoint_architecture,
    gateway_family,
)
from serving.encoders.placement import EncoderPlacement
from serving.encoders.pools import AudioFeaturePool, VisionEncoderPool
from serving.engines.base import EmbeddingEngine, EngineClient, SpeechEngine
from serving.engines.inprocess import VllmEngine
from serving.engines.remote import RemoteEngine, RemoteSettings
from serving.engines.remote_embeddings import RemoteEmbeddingEngine
from serving.engines.remote_speech import RemoteSpeechEngine
from serving.engines.specs import engine_spec
from serving.pools import ModelPool, PoolRegistry, TaskPool, encoding_places

logger = logging.getLogger(__name__)


# Resolves the pools that name no checkpoint (`model` unset) to checkpoint folders. The command line hands in the
# demo builder (demo.checkpoints.resolve_demo_pools); without a resolver every pool must name its checkpoint.
CheckpointResolver = Callable[[Settings, list[str]], dict[str, Path]]


def model_paths(settings: Settings, resolve: CheckpointResolver | None) -> dict[str, str]:
    paths = {p.name: p.model for p in settings.pools if p.model}
    unnamed = [p.name for p in settings.pools if not p.model]
    if unnamed and resolve is None:
        raise ValueError(f"pool(s) {unnamed} have no `model` path (set TESSERA_POOLS or --pool NAME=PATH)")
    if unnamed and resolve is not None:
        paths.update({name: str(path) for name, path in resolve(settings, unnamed).items()})
    return paths


async def start_pools(
    settings: Settings, stack: AsyncExitStack, checkpoints: CheckpointResolver | None
) -> PoolRegistry:
    """Start every pool's engine and encoders; each is registered for shutdown as soon as it runs."""
    # A placement this machine cannot honour is refused before any checkpoint is built or engine started.
    await asyncio.to_thread(EncoderPlacement.resolve, settings.encoder_device, settings.encoder_dtype)
    paths = await asyncio.to_thread(model_paths, settings, checkpoints)
    created = int(time.time())
    pools, tasks = [], []
    for pool in (p for p in settings.pools if p.kind != "chat"):
        tasks.append(await start_task_pool(settings, pool, paths[pool.name], stack, created))
    chat = [p for p in settings.pools if p.kind == "chat"]
    # Where each pool's media are encoded is settled from its config.json before any engine starts, so that an
    # `encoder_pools: true` the gateway cannot honour fails at once.
    families = {p.name: _gateway_family(p, paths[p.name]) for p in chat}
    for index, pool in enumerate(chat):
        family = families[pool.name]
        engine: EngineClient
        if pool.replicas:
            logger.info("connecting pool '%s' to %d replicas", pool.name, len(pool.replicas))
            remote = await RemoteEngine.connect(pool.name, Path(paths[pool.name]), _remote_settings(settings, pool))
            stack.push_async_callback(remote.close)
            engine = remote
        else:
            logger.info("starting engine for pool '%s' from %s", pool.name, paths[pool.name])
            mm_embeds = family is not None and any(family.encodes(m, "inprocess") for m in ("image", "audio"))
            spec = engine_spec(pool, paths[pool.name], settings.max_images_per_request, mm_embeds=mm_embeds)
            engine = await asyncio.to_thread(VllmEngine.start, pool.name, spec)
            stack.callback(engine.shutdown)
        built = await build_pool(settings, index, pool, engine, created, family)
        if built.counter is not None:
            stack.callback(built.counter.close)
        if built.vision is not None:
            stack.push_async_callback(built.vision.close)
        if built.audio is not None:
            stack.push_async_callback(built.audio.close)
        pools.append(built)
    return PoolRegistry(pools, tasks)


def preflight(settings: Settings) -> None:
    """The start-up checks that need no engine and no demo build, for the command line to run before the server
    starts: an encoder placement this machine cannot honour, and a pool whose checkpoint (named by path) has no
    adapter while `encoder_pools` is true. Raises ValueError naming the setting."""
    EncoderPlacement.resolve(settings.encoder_device, settings.encoder_dtype)
    for pool in settings.pools:
        if pool.kind == "chat" and pool.model:
            _gateway_family(pool, pool.model)


def _gateway_family(pool: PoolSettings, path: str) -> FamilyAdapter | None:
    architecture = checkpoint_architecture(Path(path))
    return gateway_family(pool.name, architecture, pool.encoder_pools)


async def start_task_pool(
    settings: Settings, pool: PoolSettings, model_path: str, stack: AsyncExitStack, created: int
) -> TaskPool:
    """An embedding or transcription pool: its engine (in-process, or remote replicas) and its concurrency
    admission."""
    from transformers import AutoTokenizer

    engine: EmbeddingEngine | SpeechEngine
    if pool.replicas:
        if pool.encoder_replicas:
            raise ValueError(f"pool '{pool.name}': encoder_replicas serve chat pools only")
        logger.info("connecting %s pool '%s' to %d replicas", pool.kind, pool.name, len(pool.replicas))
        remote: RemoteEmbeddingEngine | RemoteSpeechEngine
        if pool.kind == "embedding":
            remote = await RemoteEmbeddingEngine.connect(pool.name, Path(model_path), _remote_settings(settings, pool))
        else:
            remote = await RemoteSpeechEngine.connect(pool.name, Path(model_path), _remote_settings(settings, pool))
        stack.push_async_callback(remote.close)
        engine = remote
    else:
        logger.info("starting %s engine for pool '%s' from %s", pool.kind, pool.name, model_path)
        local = await asyncio.to_thread(VllmEngine.start, pool.name, engine_spec(pool, model_path, 0))
        stack.callback(local.shutdown)
        engine = local
    tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, model_path)
    task = TaskPool(
        pool.name,
        pool.kind,
        engine,
        tokenizer,
        aliases=list(pool.aliases),
        created=created,
        audio_tokens_per_second=pool.audio_tokens_per_second,
        english_only=pool.kind == "transcription" and _english_only(engine.hf_config()),
    )
    task.admission = AdmissionController(
        total_blocks=pool.max_concurrency,
        block_size=1,
        headroom_blocks=0,
        max_queue=settings.admission_max_queue,
        max_wait_s=settings.admission_max_wait_s,
        enabled=pool.admission,
    )
    return task


def _english_only(hf_config: Any) -> bool:
    """A Whisper checkpoint trained on English alone (tiny.en to medium.en) was never shown language or task tokens
    and cannot translate; its vocabulary is 51864 tokens, a multilingual one's 51865 or more."""
    return int(getattr(hf_config, "vocab_size", 0)) <= 51864


def _remote_settings(settings: Settings, pool: PoolSettings) -> RemoteSettings:
    if pool.encoder_replicas and not pool.replicas:
        raise ValueError(f"pool '{pool.name}': encoder_replicas serve a pool on replicas; it lists none")
    return RemoteSettings(
        urls=tuple(u.rstrip("/") for u in pool.replicas),
        encoder_urls=tuple(u.rstrip("/") for u in pool.encoder_replicas),
        policy=settings.fleet_policy,
        scrape_interval_s=settings.fleet_scrape_interval_s,
        connect_timeout_s=settings.fleet_connect_timeout_s,
        read_timeout_s=settings.fleet_read_timeout_s,
    )


async def build_pool(
    settings: Settings,
    index: int,
    pool: PoolSettings,
    engine: EngineClient,
    created: int,
    family: FamilyAdapter | None = None,
) -> ModelPool:
    built = ModelPool.from_engine(pool.name, engine, pool.aliases, created, pool.modalities)
    built.strength = pool.strength if pool.strength is not None else index
    built.tool_parser = pool.tool_parser
    checkpoint = Path(engine.model_path)
    from transformers import AutoTokenizer

    built.own_tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, checkpoint)
    built.judge_thresholds = checkpoint_judge_thresholds(checkpoint)
    built.architecture = architecture_of(engine.hf_config())
    if "image" in built.modalities or "audio" in built.modalities:
        model_config = engine.model_config if isinstance(engine, VllmEngine) else None
        built.counter = await asyncio.to_thread(MediaTokenCounter.for_checkpoint, checkpoint, model_config)
    path: EnginePath = "remote" if pool.replicas else "inprocess"
    if family is not None and "image" in built.modalities and family.encodes("image", path):
        vision = VisionEncoderPool(
            checkpoint,
            family,
            engine.hf_config(),
            window_ms=settings.encoder_window_ms,
            max_batch=settings.encoder_max_batch,
            threads=settings.encoder_threads,
            device=settings.encoder_device,
            dtype=settings.encoder_dtype,
        )
        await asyncio.to_thread(vision.load)
        await asyncio.to_thread(vision.warm_up)  # the first request should not pay the cold start
        vision.start()
        built.vision = vision
    if family is not None and "audio" in built.modalities and family.encodes("audio", path):
        built.audio = await asyncio.to_thread(AudioFeaturePool, checkpoint, family, engine.hf_config())
        await asyncio.to_thread(built.audio.warm_up)
    logger.info(
        "pool '%s' (%s, adapter %s): %s",
        pool.name,
        built.architecture,
        family.name if family else "none",
        "; ".join(f"{m} encoded in {where}" for m, where in encoding_places(built).items()) or "text only",
    )
    cap = engine.capacity
    built.admission = AdmissionController(
        total_blocks=cap.num_blocks,
        block_size=cap.block_size,
        headroom_blocks=math.ceil(cap.num_blocks * pool.kv_headroom_fraction),
        max_queue=settings.admission_max_queue,
        max_wait_s=settings.admission_max_wait_s,
        enabled=pool.admission,
    )
    return built
