"""The routing eval's items: fixed seeds that training refuses, sizes per slice, no text-keeping prompt, and a text
checker that reads the answer, not the question."""

from __future__ import annotations

import pytest

from demo.golden import ROUTING_SEEDS, training_items
from demo.routing_set import SLICES, check_routing_answer, split_items
from demo.training.text_keep import MORE_PROMPTS, TEXT_PROMPTS


def test_the_test_split_holds_800_items_200_a_slice_and_is_the_same_every_time():
    items = split_items("test")
    assert len(items) == 800
    assert {s: sum(i.mix == s for i in items) for s in SLICES} == dict.fromkeys(SLICES, 200)
    assert [i.to_dict() for i in items[:12]] == [i.to_dict() for i in split_items("test", 3)]
    assert len({i.id for i in items}) == 800


def test_the_splits_draw_from_their_own_seeds_which_training_refuses():
    # The world is small, so two splits may ask the same thing of the same kind of clip; their draws never repeat.
    seeds = {split: {i.seed for i in split_items(split, 30)} for split in ROUTING_SEEDS}
    assert not seeds["train"] & seeds["dev"]
    assert not seeds["train"] & seeds["test"]
    assert not seeds["dev"] & seeds["test"]
    for seed in ROUTING_SEEDS.values():
        with pytest.raises(ValueError, match="golden set"):
            next(training_items(seed))


def test_no_text_item_is_a_text_keeping_prompt_or_asks_for_france():
    for split in ROUTING_SEEDS:
        texts = [i for i in split_items(split) if i.mix == "text"]
        assert not {i.question for i in texts} & {*TEXT_PROMPTS, *MORE_PROMPTS}
        assert not any("France" in i.question for i in texts)
    kinds = {i.kind for i in split_items("test") if i.mix == "text"}
    assert len(kinds) == 8


def test_a_text_answer_is_right_when_it_holds_an_accepted_word_whole():
    item = next(i for i in split_items("test") if i.kind == "sum")
    total = item.facts["accept"][0]
    assert check_routing_answer(item, f"The sum is {total}.").correct
    assert not check_routing_answer(item, f"The sum is {total}1.").correct  # a longer number is another number
    assert not check_routing_answer(item, item.question).correct  # repeating the question answers nothing
    assert check_routing_answer(item, "").problems == ("empty answer",)
    spell = next(i for i in split_items("test") if i.kind == "spell")
    assert check_routing_answer(spell, f"It is '{spell.facts['accept'][0]}'.").correct
    media = next(i for i in split_items("test") if i.mix == "image")
    assert check_routing_answer(media, media.answer).correct  # media items are judged as the grounding eval judges
