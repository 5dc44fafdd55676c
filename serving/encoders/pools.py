"""Encoder pools: the checkpoint's own vision tower, micro-batched, handing embeddings to the engine.

How embeddings reach the engine, and why:
- Images go in as vLLM's `image_embeds` input (`{"image_embeds": flat [tokens, D], "image_grid_thw": [n, 3]}`,
  engine flag `enable_mm_embeds`). vLLM 0.32 accepts that for the Qwen2.5-Omni thinker and then skips its
  vision tower: measured, the engine's prompt ids and greedy tokens are the same as with raw pixels.
- vLLM 0.32's embeddings path returns one flat tensor for all images and kills the engine core; the
  `serving.engines.vllm_patches` plugin splits it per image, as the pixel path does.
- Audio has no embeddings input in vLLM 0.32: the thinker's audio path takes raw audio or mel features and
  always runs the tower itself. The encoder-disaggregation connectors (`vllm/distributed/ec_transfer`)
  could carry tower outputs, but they key entries by vLLM's own multimodal hash and need connector-enabled
  engines, which the in-process CPU engine does not run. So the audio pool computes the tower's input, the
  log-mel features (the checkpoint's own feature extractor), and hands them over as `input_audio_features`.
  This is also required: with
  `image_embeds` next to raw audio, vLLM 0.32 runs the HF processor on a prompt holding an image marker but
  no image, and the request fails. Measured: features from the pool give the same prompt ids and greedy
  tokens as raw audio. Features are computed over the whole clip, not per 5 s window, because Whisper's
  log-mel normalisation uses the clip's global maximum; windowing would change the tokens. The tower itself
  (in the engine) attends within chunks of its checkpoint's `n_window` (8 s for the large demo, 2 s for the
  small one).

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
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serving.encoders.detection import LabelHead
from serving.encoders.placement import EncoderPlacement
from serving.encoders.tower_io import checkpoint_tensors, log_mel
from serving.errors import Unavailable

logger = logging.getLogger(__name__)


class EncoderFailure(Unavailable):
    """The encoder pool could not produce a usable embedding (overload, crash, or NaN/Inf output)."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message, code="encoder_unavailable", retry_after_s=2.0)
        self.reason = reason


@dataclass(frozen=True)
class ImageEmbedding:
    embeds: Any  # torch.Tensor [tokens, hidden], float32
    grid_thw: tuple[int, int, int]

    @property
    def tokens(self) -> int:
        return int(self.embeds.shape[0])


@dataclass(frozen=True)
class AudioFeatures:
    features: Any  # torch.Tensor [mel bins, frames], float32
    frames: int

    @property
    def tokens(self) -> int:
        return audio_tokens_for(self.frames / 100)


@dataclass
class EncoderStats:
    batches: int = 0
    items: int = 0
    seconds: float = 0.0
    failures: dict[str, int] = field(default_factory=dict)

    def fail(self, reason: str) -> None:
        self.failures[reason] = self.failures.get(reason, 0) + 1


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2-VL's resize rule: both sides multiples of `factor`, total pixels within bounds."""
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


@dataclass(frozen=True)
class VisionGeometry:
    patch_size: int
    merge_size: int
    min_pixels: int
    max_pixels: int

    def tokens_for(self, width: int, height: int) -> int:
        factor = self.patch_size * self.merge_size
        h, w = smart_resize(height, width, factor, self.min_pixels, self.max_pixels)
        return (h // factor) * (w // factor)


def image_processor_config(checkpoint: Path) -> dict[str, Any]:
    for name in ("processor_config.json", "preprocessor_config.json"):
        path = checkpoint / name
        if path.is_file():
            cfg = json.loads(path.read_text())
            return dict(cfg.get("image_processor", cfg))
    return {}


def vision_geometry(checkpoint: Path) -> VisionGeometry:
    """The image processor's resize rule, read from the checkpoint, for counting tokens from headers."""
    image = image_processor_config(checkpoint)
    size = image.get("size") or {}
    return VisionGeometry(
        patch_size=int(image.get("patch_size", 14)),
        merge_size=int(image.get("merge_size", 2)),
        min_pixels=int(size.get("shortest_edge", image.get("min_pixels", 56 * 56))),
        max_pixels=int(size.get("longest_edge", image.get("max_pixels", 28 * 28 * 1280))),
    )


def audio_tokens_for(seconds: float) -> int:
    """Qwen2-Audio/Omni towers: 100 mel frames per second, two stride-2 reductions (about 25 tokens/s)."""
    frames = min(3000, math.ceil(seconds * 100))
    return max(0, (((frames - 1) // 2 + 1) - 2) // 2 + 1)


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
        *,
        window_ms: float = 12.0,
        max_batch: int = 48,
        max_queue: int = 512,
        threads: int = 1,
        device: str = "auto",
        dtype: str = "float32",
    ) -> None:
        self.checkpoint = checkpoint
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
        self.geometry, self.identity = self._describe()
        self.fault: Callable[[Any], Any] | None = None  # test hook: transforms the tower's output
        self.warmup_s: float | None = None  # how long the warm-up batch took; None until it ran
        self.label_head: LabelHead | None = None  # what the tower detects, where it was trained for grounding

    def _describe(self) -> tuple[VisionGeometry, str]:
        image = image_processor_config(self.checkpoint)
        pre = {k: image.get(k) for k in sorted(image) if k not in ("processor_class",)}
        identity = encoder_identity(self.checkpoint, "thinker.visual", pre, dtype=self.placement.dtype)
        return vision_geometry(self.checkpoint), identity

    def load(self) -> None:
        """Load the tower from the checkpoint; blocking (call it off the event loop)."""
        import torch
        from transformers import AutoConfig, AutoImageProcessor
        from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniVisionEncoder

        config = AutoConfig.from_pretrained(self.checkpoint)
        thinker = getattr(config, "thinker_config", config)
        # Built in the compute dtype (buffers such as rotary frequencies stay float32, as in from_pretrained).
        model = Qwen2_5OmniVisionEncoder._from_config(thinker.vision_config, dtype=self.placement.torch_dtype)
        state = checkpoint_tensors(self.checkpoint, "thinker.visual.")
        missing, _unexpected = model.load_state_dict(state, strict=False)
        if missing:
            raise RuntimeError(f"vision tower weights missing from {self.checkpoint}: {missing[:5]}")
        model.to(torch.device(self.placement.device)).eval()
        self._model = model
        self._processor = AutoImageProcessor.from_pretrained(self.checkpoint)
        self.label_head = LabelHead.load(self.checkpoint)
        logger.info(
            "vision encoder pool loaded from %s on %s in %s (window %.0f ms, max batch %d)",
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

        side = self.geometry.patch_size * self.geometry.merge_size * 2
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
        sizes = (grid.prod(-1) // (self.geometry.merge_size**2)).tolist()
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
                out = self._model(pixels, grid_thw=grid.to(device))
                embeds = out.pooler_output if hasattr(out, "pooler_output") else out
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
    """Computes the audio tower's log-mel input with the checkpoint's own feature extractor, off the loop."""

    def __init__(self, checkpoint: Path) -> None:
        from transformers import WhisperFeatureExtractor

        self.checkpoint = checkpoint
        self.stats = EncoderStats()
        self._extractor = WhisperFeatureExtractor.from_pretrained(checkpoint)
        pre = {k: v for k, v in sorted(self._extractor.to_dict().items()) if isinstance(v, int | float | str)}
        self.identity = encoder_identity(checkpoint, "audio-features", pre, dtype="float32")
        self.sample_rate = int(self._extractor.sampling_rate)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="audio-features")
        self.warmup_s: float | None = None

    async def encode(self, samples: Any) -> AudioFeatures:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.encode_one, samples)

    def warm_up(self) -> float:
        """Compute features for one second of silence, so the first request skips the cold start; blocking.

        Not counted in `stats`. Returns (and keeps in `warmup_s`) its duration.
        """
        import numpy as np

        started = time.perf_counter()
        self._features(np.zeros(self.sample_rate, dtype=np.float32))
        self.warmup_s = time.perf_counter() - started
        logger.info("audio feature pool of %s warmed up in %.0f ms", self.checkpoint, self.warmup_s * 1000)
        return self.warmup_s

    def encode_one(self, samples: Any) -> AudioFeatures:
        import torch

        started = time.perf_counter()
        features, frames = self._features(samples)
        self.stats.seconds += time.perf_counter() - started
        self.stats.batches += 1
        self.stats.items += 1
        if not torch.isfinite(features).all():
            self.stats.fail("non_finite")
            raise EncoderFailure("the audio features contain NaN or Inf", reason="non_finite")
        return AudioFeatures(features, frames)

    def _features(self, samples: Any) -> tuple[Any, int]:
        return log_mel(self._extractor, samples)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
