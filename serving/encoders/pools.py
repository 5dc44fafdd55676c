"""Encoder pools: the checkpoint's own towers, run in the gateway, handing encoder outputs to the engine.

What a tower is, how wide its output is and which fields the engine takes for it are the family adapter's
(serving.encoders.families); this module only batches, places and guards the work:
- Images: the vision tower over batches gathered within a short window; the engine takes the embeddings as its
  `image_embeds` input (engine flag `enable_mm_embeds`) and skips its own tower. Measured for the Qwen2.5-Omni
  thinker: the engine's prompt ids and greedy tokens are the same as with raw pixels.
- Audio: for families whose engine runs its own audio tower (the Omni thinkers, which take no audio embeddings in
  vLLM 0.32), the tower's log-mel input computed with the checkpoint's own feature extractor, handed over as
  features; for families whose engine takes audio embeddings (Qwen2-Audio), the tower and projector too, so a cached
  clip skips all of it. Features are computed over the whole clip, not per window, because Whisper's log-mel
  normalisation uses the clip's global maximum; windowing would change the tokens.

Where the vision tower runs is an `EncoderPlacement`: a torch device (CUDA when there is one, by default) and a
compute dtype. Whatever the placement, embeddings leave the pool on the CPU in float32, which is what the engine
input and the embedding cache take; the dtype is part of the encoder's identity, so outputs of different
precisions never share cache entries. The device is not: float32 on any device stands for the same encoder.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serving.encoders.detection import LabelHead
from serving.encoders.families import AudioEmbedding, AudioFeatures, FamilyAdapter, ImageEmbedding
from serving.encoders.placement import EncoderPlacement
from serving.encoders.tower_io import log_mel
from serving.errors import Unavailable

logger = logging.getLogger(__name__)


class EncoderFailure(Unavailable):
    """The encoder pool could not produce a usable embedding (overload, crash, or NaN/Inf output)."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message, code="encoder_unavailable", retry_after_s=2.0)
        self.reason = reason


@dataclass
class EncoderStats:
    batches: int = 0
    items: int = 0
    seconds: float = 0.0
    failures: dict[str, int] = field(default_factory=dict)

    def fail(self, reason: str) -> None:
        self.failures[reason] = self.failures.get(reason, 0) + 1


def image_processor_config(checkpoint: Path) -> dict[str, Any]:
    for name in ("processor_config.json", "preprocessor_config.json"):
        path = checkpoint / name
        if path.is_file():
            cfg = json.loads(path.read_text())
            return dict(cfg.get("image_processor", cfg))
    return {}


def encoder_identity(checkpoint: Path, tower_prefix: str, preprocessing: dict[str, Any], *, dtype: str) -> str:
    """Names the encoder: its weights (by the checkpoint's weight digest), its preprocessing and compute dtype."""
    manifest = checkpoint / "tessera-demo.json"
    if manifest.is_file():
        weights = json.loads(manifest.read_text()).get("weights_sha256", "")
    else:
        files = sorted(checkpoint.glob("*.safetensors"))
        weights = hashlib.sha256(
            "".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files).encode()
        ).hexdigest()
    blob = json.dumps({"weights": weights, "tower": tower_prefix, "pre": preprocessing, "dtype": dtype}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class VisionEncoderPool:
    """Runs the checkpoint's vision tower on batches of images gathered within a short window."""

    def __init__(
        self,
        checkpoint: Path,
        family: FamilyAdapter,
        hf_config: Any,
        *,
        window_ms: float = 12.0,
        max_batch: int = 48,
        max_queue: int = 512,
        threads: int = 1,
        device: str = "auto",
        dtype: str = "float32",
    ) -> None:
        self.checkpoint = checkpoint
        self.family = family
        self._hf_config = hf_config
        self.merge_size = family.merge_size(hf_config)
        self.placement = EncoderPlacement.resolve(device, dtype)
        self.window_s = window_ms / 1000.0
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.stats = EncoderStats()
        self._threads = threads
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vision-encoder")
        self._queue: asyncio.Queue[tuple[Any, asyncio.Future[ImageEmbedding]]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._model: Any = None
        self._processor: Any = None
        self._lock = threading.Lock()
        self.identity = self._describe()
        self.fault: Callable[[Any], Any] | None = None  # test hook: transforms the tower's output
        self.warmup_s: float | None = None  # how long the warm-up batch took; None until it ran
        self.label_head: LabelHead | None = None  # what the tower detects, where it was trained for grounding

    @classmethod
    def for_checkpoint(cls, checkpoint: Path, **kwargs: Any) -> VisionEncoderPool:
        """The pool of a checkpoint's own vision tower, by the adapter of its architecture; blocking."""
        from transformers import AutoConfig

        from serving.encoders.families import architecture_of, family_for

        config = AutoConfig.from_pretrained(checkpoint)
        family = family_for(architecture_of(config))
        if family is None or not family.image_paths:
            raise ValueError(f"the gateway has no vision encoder adapter for {architecture_of(config)} ({checkpoint})")
        return cls(checkpoint, family, config, **kwargs)

    def _describe(self) -> str:
        image = image_processor_config(self.checkpoint)
        pre = {k: image.get(k) for k in sorted(image) if k not in ("processor_class",)}
        # The tower's weight prefix (`thinker.visual` for the Omni thinkers, as before adapters), else the family.
        tower = self.family.vision_prefixes[0].rstrip(".") if self.family.vision_prefixes else self.family.name
        return encoder_identity(self.checkpoint, tower, pre, dtype=self.placement.dtype)

    def load(self) -> None:
        """Load the tower from the checkpoint; blocking (call it off the event loop)."""
        import torch
        from transformers import AutoImageProcessor

        # Built in the compute dtype (buffers such as rotary frequencies stay float32, as in from_pretrained).
        model = self.family.build_vision_tower(self._hf_config, self.placement.torch_dtype)
        prefix, state = self.family.vision_state(self.checkpoint)
        missing, _unexpected = model.load_state_dict(state, strict=False)
        if missing:
            raise RuntimeError(f"vision tower weights ({prefix}*) missing from {self.checkpoint}: {missing[:5]}")
        model.to(torch.device(self.placement.device)).eval()
        self._model = model
        self._processor = AutoImageProcessor.from_pretrained(self.checkpoint)
        self.label_head = LabelHead.load(self.checkpoint)
        logger.info(
            "vision encoder pool (%s) loaded from %s on %s in %s (window %.0f ms, max batch %d)",
            self.family.name,
            self.checkpoint,
            self.placement.device,
            self.placement.dtype,
            self.window_s * 1000,
            self.max_batch,
        )
        if self.placement.device == "cpu" and self.placement.dtype != "float32":
            logger.warning("vision encoder runs in %s on the CPU: slower than float32 there", self.placement.dtype)

    def warm_up(self) -> float:
        """Encode one small synthetic image so that the first request does not pay the cold start; blocking.

        Not counted in `stats`, which describe real traffic. Returns (and keeps in `warmup_s`) its duration.
        """
        from PIL import Image

        side = self.family.patch_size(self._hf_config) * self.merge_size * 2
        image = Image.new("RGB", (side, side), (127, 127, 127))
        started = time.perf_counter()
        self._forward([image])
        self.warmup_s = time.perf_counter() - started
        logger.info("vision encoder of %s warmed up in %.0f ms", self.checkpoint, self.warmup_s * 1000)
        return self.warmup_s

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._batch_loop())

    async def encode(self, image: Any) -> ImageEmbedding:
        if self._queue is None:
            raise EncoderFailure("the vision encoder pool is not running", reason="stopped")
        if self._queue.qsize() >= self.max_queue:
            self.stats.fail("overloaded")
            raise EncoderFailure("the vision encoder pool is overloaded", reason="overloaded")
        future: asyncio.Future[ImageEmbedding] = asyncio.get_running_loop().create_future()
        await self._queue.put((image, future))
        return await future

    async def _batch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            live = [(img, fut) for img, fut in await self._gather_batch() if not fut.done()]
            if not live:
                continue
            try:
                results: list[ImageEmbedding | EncoderFailure] = await loop.run_in_executor(
                    self._executor, self.encode_batch, [img for img, _ in live]
                )
            except EncoderFailure as exc:
                results = [exc] * len(live)
            except Exception as exc:
                self.stats.fail("crashed")
                logger.exception("vision encoder batch failed")
                results = [EncoderFailure(f"the vision encoder failed: {type(exc).__name__}", reason="crashed")]
                results *= len(live)
            for (_, fut), result in zip(live, results, strict=True):
                if fut.done():
                    continue
                if isinstance(result, EncoderFailure):
                    fut.set_exception(result)
                else:
                    fut.set_result(result)

    async def _gather_batch(self) -> list[tuple[Any, asyncio.Future[ImageEmbedding]]]:
        """The first waiting image, plus whatever else arrives within the window, up to the batch limit."""
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        batch = [await self._queue.get()]
        deadline = loop.time() + self.window_s
        while len(batch) < self.max_batch:
            remaining = deadline - loop.time()
            if remaining <= 0:
                try:
                    batch.append(self._queue.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    break
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), remaining))
            except TimeoutError:
                break
        return batch

    def encode_batch(self, images: list[Any]) -> list[ImageEmbedding | EncoderFailure]:
        """One forward pass over every image; blocking. Non-finite outputs fail only their own image."""
        import torch

        started = time.perf_counter()
        embeds, grid = self._forward(images)
        sizes = (grid.prod(-1) // (self.merge_size**2)).tolist()
        results: list[ImageEmbedding | EncoderFailure] = []
        for chunk, thw in zip(torch.split(embeds, sizes), grid.tolist(), strict=True):
            if not torch.isfinite(chunk).all():
                self.stats.fail("non_finite")
                results.append(EncoderFailure("the vision encoder produced NaN or Inf", reason="non_finite"))
            else:
                results.append(ImageEmbedding(chunk.contiguous().clone(), (thw[0], thw[1], thw[2])))
        self.stats.batches += 1
        self.stats.items += len(images)
        self.stats.seconds += time.perf_counter() - started
        return results

    def _forward(self, images: list[Any]) -> tuple[Any, Any]:
        """The tower over `images` on the pool's device: (embeddings on the CPU in float32, CPU grid [n, 3])."""
        import torch

        if self._model is None:
            raise EncoderFailure("the vision encoder is not loaded", reason="stopped")
        device = torch.device(self.placement.device)
        with self._lock, torch.inference_mode():
            previous = torch.get_num_threads()
            torch.set_num_threads(self._threads)
            try:
                inputs = self._processor(images=images, return_tensors="pt")
                grid = inputs["image_grid_thw"]
                pixels = inputs["pixel_values"].to(device=device, dtype=self.placement.torch_dtype)
                embeds = self.family.vision_forward(self._model, pixels, grid.to(device))
                if self.fault is not None:
                    embeds = self.fault(embeds)
                embeds = embeds.to(device="cpu", dtype=torch.float32)
            finally:
                torch.set_num_threads(previous)
        return embeds, grid

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._executor.shutdown(wait=False, cancel_futures=True)


class AudioFeaturePool:
    """Computes a clip's log-mel features with the checkpoint's own feature extractor, off the loop; and where the
    family's engine takes audio embeddings, runs the audio tower (and projector) over them too."""

    def __init__(self, checkpoint: Path, family: FamilyAdapter, hf_config: Any) -> None:
        from transformers import WhisperFeatureExtractor

        self.checkpoint = checkpoint
        self.family = family
        self.stats = EncoderStats()
        self._extractor = WhisperFeatureExtractor.from_pretrained(checkpoint)
        self.embeds = family.audio_input == "embeds"
        self._tower: Any = None
        if self.embeds:
            import torch

            self._tower = family.build_audio_tower(checkpoint, hf_config, torch.float32).eval()
        pre = {k: v for k, v in sorted(self._extractor.to_dict().items()) if isinstance(v, int | float | str)}
        stage = f"{family.name}-audio-tower" if self.embeds else "audio-features"
        self.identity = encoder_identity(checkpoint, stage, pre, dtype="float32")
        self.sample_rate = int(self._extractor.sampling_rate)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="audio-encoder")
        self.warmup_s: float | None = None

    async def encode(self, samples: Any, tokens: int) -> AudioFeatures | AudioEmbedding:
        """The clip's encoder output; `tokens` is what the engine places for it (serving.encoders.counting)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.encode_one, samples, tokens)

    def warm_up(self) -> float:
        """Encode one second of silence, so the first request skips the cold start; blocking.

        Not counted in `stats`. Returns (and keeps in `warmup_s`) its duration.
        """
        import numpy as np

        started = time.perf_counter()
        self._encode(np.zeros(self.sample_rate, dtype=np.float32), 0)
        self.warmup_s = time.perf_counter() - started
        logger.info("audio pool of %s warmed up in %.0f ms", self.checkpoint, self.warmup_s * 1000)
        return self.warmup_s

    def encode_one(self, samples: Any, tokens: int) -> AudioFeatures | AudioEmbedding:
        import torch

        started = time.perf_counter()
        out = self._encode(samples, tokens)
        self.stats.seconds += time.perf_counter() - started
        self.stats.batches += 1
        self.stats.items += 1
        tensor = out.embeds if isinstance(out, AudioEmbedding) else out.features
        if not torch.isfinite(tensor).all():
            self.stats.fail("non_finite")
            raise EncoderFailure("the audio encoder produced NaN or Inf", reason="non_finite")
        if isinstance(out, AudioEmbedding) and tokens and out.tokens != tokens:
            self.stats.fail("size")
            raise EncoderFailure(
                f"the audio tower gave {out.tokens} tokens where the engine places {tokens}", reason="size"
            )
        return out

    def _encode(self, samples: Any, tokens: int) -> AudioFeatures | AudioEmbedding:
        import torch

        if not self.embeds:
            features, frames = log_mel(self._extractor, samples)
            return AudioFeatures(features, frames, tokens)
        padded, frames = log_mel(self._extractor, samples, cut=False)
        with torch.inference_mode():
            embeds = self.family.audio_forward(self._tower, padded, frames)
        return AudioEmbedding(embeds.to(torch.float32).contiguous(), frames)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
