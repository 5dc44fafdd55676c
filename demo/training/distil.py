"""The text stage of `tessera models train-demo` for a pool whose text model is cut from SmolLM2's (`small`).

Cutting SmolLM2-135M to a few of its 30 layers leaves a model whose next-token guesses are far off (on this
project's own docs, cross-entropy 17 where the whole model's is 4.4). The text stage re-fits it: the adapter on every
projection of the cut model learns to reproduce the whole model's outputs on the same prose, its final hidden states
(what `lm_head`, shared by both, reads) and its next-token distributions at a sample of positions. The whole model is
the teacher and never trains; its answers are also the text items of the joint stage (demo.training.text_keep).

The prose is this repository's own documentation (`docs/*.md` and README.md: English, in a clone everywhere)
followed by the teacher's answers to the everyday questions rendered as chat turns, cut into windows of
`text_length` tokens; each step draws `text_batch` windows from a generator seeded by (seed, stage, step).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from demo.golden import GoldenItem
from demo.training.thinker import prompt_text

REPO = Path(__file__).resolve().parents[2]
# Positions per batch whose whole next-token distribution is compared (the rest compare hidden states only).
KL_POSITIONS = 64


def prose_windows(tokenizer: Any, length: int, answers: list[GoldenItem]) -> tuple[Any, str]:
    """Windows of `length` tokens over the docs and the teacher's chat answers, and a fingerprint of the text."""
    import torch

    sources = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
    text = "\n\n".join(path.read_text() for path in sources)
    chats = "".join(prompt_text(item.question, item.answer, media=()) + "\n" for item in answers)
    text = text + "\n\n" + chats * 4  # the chat turns are short beside the docs: weigh them up
    ids = tokenizer(text)["input_ids"]
    count = len(ids) // length
    windows = torch.tensor(ids[: count * length]).view(count, length)
    return windows, hashlib.sha256(text.encode()).hexdigest()


def distil_loss(student: Any, teacher: Any, windows: Any, rng: np.random.Generator) -> tuple[Any, dict[str, float]]:
    """How far the student's final hidden states (relative to their size) and next-token distributions (KL at
    `KL_POSITIONS` sampled positions) lie from the teacher's on `windows`."""
    import torch
    from torch.nn import functional

    mask = torch.ones_like(windows)

    def hidden(thinker: Any) -> Any:
        positions, _ = thinker.get_rope_index(windows, None, None, mask, False, None)
        return thinker.model(input_ids=windows, attention_mask=mask, position_ids=positions).last_hidden_state

    with torch.no_grad():
        target = hidden(teacher)
    out = hidden(student)
    error = ((out - target) ** 2).sum(-1).mean() / (target**2).sum(-1).mean()
    flat = windows.numel()
    picked = torch.from_numpy(rng.choice(flat, size=min(KL_POSITIONS, flat), replace=False))
    with torch.no_grad():
        wanted = functional.log_softmax(teacher.lm_head(target.reshape(flat, -1)[picked]).float(), dim=-1)
    got = functional.log_softmax(student.lm_head(out.reshape(flat, -1)[picked]).float(), dim=-1)
    kl = functional.kl_div(got, wanted, log_target=True, reduction="batchmean")
    agree = (got.argmax(-1) == wanted.argmax(-1)).float().mean()
    return error + kl, {"hidden error": float(error.item()), "kl": float(kl.item()), "top-1 agreement": float(agree)}
