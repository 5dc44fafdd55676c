"""The joint stage's text items: the untouched model's own answers, made once per work directory and kept."""

from __future__ import annotations

import json

import pytest

from demo.checkpoints import build_demo_checkpoints
from demo.training import text_keep
from demo.training.thinker import load_thinker, prompt_text
from tests.conftest import MODELS_DIR


def _thinker(name: str):
    return load_thinker(build_demo_checkpoints(MODELS_DIR, [name], progress=lambda _: None)[name])


def _prompt(question: str) -> str:
    return prompt_text(question, media=())


def test_answers_are_made_once_then_read_back(tmp_path, monkeypatch):
    thinker, processor = _thinker("large")  # the demo with SmolLM2's text weights: it finishes short answers
    monkeypatch.setattr(text_keep, "TEXT_PROMPTS", ("Hello!", "What is two plus two?"))
    path = tmp_path / "text_answers.json"
    lines: list[str] = []
    items = text_keep.own_answers(thinker, processor, path, _prompt, max_new_tokens=64, progress=lines.append)
    stored = json.loads(path.read_text())
    assert items
    assert all(i.answer for i in items)
    assert [tuple(p) for p in stored["pairs"]] == [(i.question, i.answer) for i in items]
    assert lines
    assert lines[-1].startswith("  text answers of the untouched model: 2/2")
    assert all(i.scene is None and i.clip is None and i.media_order == () for i in items)

    def refuse(*args, **kwargs):
        raise AssertionError("a stored answer was generated again")

    monkeypatch.setattr(thinker, "generate", refuse)
    again = text_keep.own_answers(thinker, processor, path, _prompt, max_new_tokens=64, progress=lines.append)
    assert [(i.question, i.answer) for i in again] == [(i.question, i.answer) for i in items]
    # Other prompts (or another budget) do not reuse the file.
    with pytest.raises(AssertionError, match="generated again"):
        text_keep.own_answers(thinker, processor, path, _prompt, max_new_tokens=65, progress=lines.append)


def test_an_answer_cut_off_by_the_budget_is_left_out(tmp_path, monkeypatch):
    thinker, processor = _thinker("small")  # random text weights: three tokens never reach the end of a turn
    monkeypatch.setattr(text_keep, "TEXT_PROMPTS", ("Tell me a long story.",))
    path = tmp_path / "a.json"
    assert text_keep.own_answers(thinker, processor, path, _prompt, max_new_tokens=3) == []
    assert json.loads(path.read_text())["pairs"] == []
