"""Media token counts from the engine's own multimodal processor: what the engine will place for one medium.

The pre-engine estimate (admission, quota holds, the opened row's split), a remote replica's placeholder
expansion and the embedding-cache size check all ask this counter, so the numbers Tessera works with before the
engine runs are the engine's. The counter runs vLLM's processor for the pool's checkpoint on a blank medium of
the probed size (an image of that width and height, a clip of that many samples) and reads the placeholder it
produced; results are kept by (medium, size), and the processor runs on one worker thread, never on the event loop.

Usage counts a medium's embedding positions (the placeholder's pad tokens). Where a family's placeholder span
also holds wrapper tokens around them (Gemma 3's image start and end, InternVL's `<img>`/`</img>`), those are
counted as text: they are ordinary prompt tokens the engine embeds from the vocabulary.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

AUDIO_SAMPLE_RATE = 16_000  # the rate every clip is resampled to before the engine
MAX_ENTRIES = 4096


class MediaTokenCounter:
    """Counts the placeholders the engine gives an image of a size, or a clip of a length."""

    def __init__(self, processor: Any, *, max_entries: int = MAX_ENTRIES) -> None:
        self._processor = processor
        self._counts: OrderedDict[tuple[str, tuple[int, ...]], int] = OrderedDict()
        self._max_entries = max_entries
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="media-counter")

    @classmethod
    def for_checkpoint(cls, checkpoint: Path, model_config: Any = None) -> MediaTokenCounter:
        """vLLM's processor for the checkpoint: from the engine's own model config when it runs in this process,
        else from a config read off the checkpoint (no weights). Blocking: seconds, call it off the event loop."""
        from vllm.multimodal import MULTIMODAL_REGISTRY

        started = time.monotonic()
        if model_config is None:
            from vllm.config import ModelConfig

            model_config = ModelConfig(model=str(checkpoint), tokenizer=str(checkpoint), dtype="float32")
        counter = cls(MULTIMODAL_REGISTRY.create_processor(model_config))
        logger.info("media token counter of %s ready in %.1fs", checkpoint, time.monotonic() - started)
        return counter

    def count_now(self, medium: str, size: tuple[int, ...]) -> int:
        """The placeholder tokens of one `medium` of `size`: (width, height) of an image, (samples,) of a clip at
        16 kHz. Blocking."""
        key = (medium, tuple(int(s) for s in size))
        found = self._counts.get(key)
        if found is not None:
            self._counts.move_to_end(key)
            return found
        count = self._measure(medium, key[1])
        self._counts[key] = count
        while len(self._counts) > self._max_entries:
            self._counts.popitem(last=False)
        return count

    async def count(self, medium: str, size: tuple[int, ...]) -> int:
        found = self._counts.get((medium, tuple(int(s) for s in size)))
        if found is not None:
            return found
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.count_now, medium, size)

    def image(self, width: int, height: int) -> int:
        return self.count_now("image", (width, height))

    def audio_seconds(self, seconds: float) -> int:
        return self.count_now("audio", (round(seconds * AUDIO_SAMPLE_RATE),))

    def _measure(self, medium: str, size: tuple[int, ...]) -> int:
        item = _blank(medium, size)
        processor = self._processor
        text = processor.dummy_inputs.get_dummy_text({medium: 1})
        items = processor.info.parse_mm_data({medium: [item]}, validate=False)
        out = processor(text, items)
        ranges = out["mm_placeholders"].get(medium) or []
        if len(ranges) != 1:
            raise RuntimeError(f"the engine's processor placed {len(ranges)} {medium} placeholders for one item")
        return int(ranges[0].get_num_embeds())

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _blank(medium: str, size: tuple[int, ...]) -> Any:
    if medium == "image":
        from PIL import Image

        width, height = size
        return Image.new("RGB", (max(1, width), max(1, height)), (127, 127, 127))
    if medium == "audio":
        import numpy as np

        return np.zeros(max(1, size[0]), dtype=np.float32)
    raise ValueError(f"no token count for medium {medium!r}")
