"""Stand-ins shared by the training tests."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch

from demo.training.trainer import TrainConfig, Trainer


def _stand_in_trainer(joint_vision_blocks: int = 0, **settings) -> Trainer:
    """A Trainer holding small stand-ins for the towers, the adapter and the heads (no model)."""
    trainer = Trainer.__new__(Trainer)
    trainer.config = TrainConfig(joint_vision_blocks=joint_vision_blocks, audio_train_layers=1, **settings)
    visual = torch.nn.Module()
    visual.blocks = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(4))
    visual.merger = torch.nn.Linear(4, 4)
    audio = torch.nn.Module()
    audio.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(2))
    audio.proj = torch.nn.Linear(4, 4)
    trainer.thinker = SimpleNamespace(visual=visual, audio_tower=audio)
    trainer.heads = {"label": torch.nn.Linear(4, 2), "coordinates": torch.nn.Linear(4, 2)}
    trainer.lora = {"lora.a": torch.nn.Parameter(torch.zeros(2))}
    return trainer


@pytest.fixture
def stand_in_trainer() -> Callable[..., Trainer]:
    return _stand_in_trainer
