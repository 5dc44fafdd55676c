"""Question kinds: every wording of the golden sets lands in its own kind; other questions in `other`."""

from __future__ import annotations

import pytest

from demo.golden import golden_set
from grounding.questions import OTHER, question_kind


@pytest.mark.parametrize("name", ["heldout", "smoke"])
def test_every_golden_question_gets_its_own_kind(name):
    wrong = [(item.question, item.kind, question_kind(item.question)) for item in golden_set(name)]
    wrong = [w for w in wrong if w[1] != w[2]]
    assert wrong == []


def test_questions_outside_the_world_are_other():
    for question in ("What is the capital of France?", "Write a haiku about rain.", ""):
        assert question_kind(question) == OTHER


def test_the_red_circle_question_is_a_describe():
    assert question_kind("What shape and colour is in this image?") == "describe"
    assert question_kind("When is the meeting?") == "when"
