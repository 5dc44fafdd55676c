"""The joint stage's answer loss (demo.training.stage_losses.answer_cross_entropy): averaged over every answer
token of a batch, or per item, so a one-word answer weighs as much as a long one."""

from __future__ import annotations

import math

import pytest
import torch

from demo.training.stage_losses import answer_cross_entropy


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # two items: the first answers in one token, the second in four; the third row is all prompt
    targets = torch.tensor([[-100, 1, -100, -100, -100], [-100, 0, 0, 0, 0], [-100, -100, -100, -100, -100]])
    where = targets != -100
    logits = torch.full((int(where.sum()), 2), 0.0)
    logits[0] = torch.tensor([0.0, math.log(3.0)])  # P(right) 0.75 for the one-token answer
    for row in range(1, 5):
        logits[row] = torch.tensor([math.log(9.0), 0.0])  # P(right) 0.9 for each token of the long answer
    return logits, targets, where


def test_token_averaged_loss_lets_the_long_answer_outweigh_the_short():
    logits, targets, where = _batch()
    loss = answer_cross_entropy(logits, targets, where, per_item=False)
    assert float(loss) == pytest.approx((-math.log(0.75) - 4 * math.log(0.9)) / 5)


def test_per_item_loss_weighs_each_answer_once_and_skips_rows_without_one():
    logits, targets, where = _batch()
    loss = answer_cross_entropy(logits, targets, where, per_item=True)
    assert float(loss) == pytest.approx((-math.log(0.75) - math.log(0.9)) / 2)


def test_per_item_loss_sends_the_short_answer_a_larger_share_of_the_gradient():
    logits, targets, where = _batch()
    shares = []
    for per_item in (False, True):
        leaf = logits.clone().requires_grad_(True)
        answer_cross_entropy(leaf, targets, where, per_item=per_item).backward()
        assert leaf.grad is not None
        shares.append(float(leaf.grad[0].abs().sum() / leaf.grad.abs().sum()))
    # |d loss / d logits| is 2(1 - p) per token: 0.5 for the short answer's token and 0.2 for each of the long one's
    assert shares[0] == pytest.approx(0.5 / (0.5 + 4 * 0.2), abs=1e-6)
    assert shares[1] == pytest.approx(0.5 / (0.5 + 0.2), abs=1e-6)
