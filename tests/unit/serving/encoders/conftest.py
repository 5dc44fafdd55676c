"""Fixtures of the encoder tests: the small demo checkpoint, and vLLM's own media token counts for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo.checkpoints import build_demo_checkpoints
from serving.encoders.counting import MediaTokenCounter
from tests.conftest import MODELS_DIR


@pytest.fixture(scope="session")
def small_checkpoint() -> Path:
    return build_demo_checkpoints(MODELS_DIR, ["small"], progress=lambda _: None)["small"]


@pytest.fixture(scope="session")
def small_counter(small_checkpoint: Path) -> MediaTokenCounter:
    """The engine's processor for the small checkpoint (no engine): the oracle of every token count."""
    return MediaTokenCounter.for_checkpoint(small_checkpoint)
