"""Free layouts (shapes anywhere, of any size up to three times the world's large), the judge's questions as training
items, and free-layout training items."""

import collections
from itertools import combinations

import numpy as np
import pytest

from demo.golden import FREE_SEED, GoldenItem, golden_set, training_items
from demo.training.curriculum import free_layout_item
from demo.training.verify import NO, YES, verify_item
from demo.world import FREE_LARGE, FREE_SMALL, MAX_REACH, POSITIONS, region_of, sample_free_scene
from grounding.image_evidence import position_of


def test_free_scenes_keep_shapes_apart_inside_the_frame_in_regions_of_their_own():
    rng = np.random.default_rng(3)
    scenes = [sample_free_scene(rng) for _ in range(400)]
    counts = collections.Counter(len(s.shapes) for s in scenes)
    assert set(counts) == {1, 2, 3, 4}
    radii = []
    for scene in scenes:
        short = min(scene.width, scene.height)
        for shape in scene.shapes:
            reach = MAX_REACH * shape.radius
            assert reach <= shape.cx <= scene.width - reach
            assert reach <= shape.cy <= scene.height - reach
            assert shape.position == region_of(shape.cx / scene.width, shape.cy / scene.height)
            low, high = FREE_SMALL if shape.size == "small" else FREE_LARGE
            assert low - 0.01 <= shape.radius / short <= high + 0.01
            radii.append(shape.radius / short)
        assert len({s.position for s in scene.shapes}) == len(scene.shapes)
        assert len({s.kind for s in scene.shapes}) == len(scene.shapes)
        for a, b in combinations(scene.shapes, 2):
            assert np.hypot(a.cx - b.cx, a.cy - b.cy) >= MAX_REACH * (a.radius + b.radius)
    assert max(radii) > 0.25, "some shapes are drawn well past the world's large size"
    assert {s.position for scene in scenes for s in scene.shapes} == set(POSITIONS)


@pytest.mark.parametrize(("x", "y"), [(0.5, 0.5), (0.1, 0.5), (0.9, 0.45), (0.5, 0.1), (0.45, 0.9), (0.3, 0.2)])
def test_a_free_shapes_position_is_the_region_the_label_head_reads_there(x, y):
    assert region_of(x, y) == position_of(y, x)  # the label head's reader takes (row, column)


def test_the_free_set_is_free_layouts_with_every_slice_full():
    items = golden_set("free")
    assert collections.Counter(i.mix for i in items) == {"image": 200, "audio": 200, "image+audio": 200}
    assert all(i.seed != FREE_SEED for i in items)
    world_radius = max(s.radius / min(i.scene.width, i.scene.height) for i in items if i.scene for s in i.scene.shapes)
    assert world_radius > 0.2, "free layouts, not the world's (whose largest radius is 11% of the shorter side)"


def _items(n: int) -> list[GoldenItem]:
    return list(training_items(5, count=n))


def test_verify_items_ask_the_judges_questions_answered_yes_or_no():
    rng = np.random.default_rng(0)
    made = [verify_item(item, rng) for item in _items(600)]
    assert {v.kind for v in made} == {"verify"}
    assert {v.answer for v in made} == {YES, NO}
    shares = collections.Counter(v.answer for v in made)
    assert 0.35 < shares[YES] / len(made) < 0.65
    judged = [v for v in made if v.question.endswith("Answer yes or no.")]
    assert len(judged) > len(made) / 3, "most are worded as the judge words them"
    giraffes = [v for v in made if any(t in v.question for t in ("giraffe", "tree", "boat", "window"))]
    assert giraffes
    assert all(v.answer == NO for v in giraffes), "nothing outside the world is ever in a scene"
    # a changed count is asked with its number: "Is there a shape" would be true of every scene
    assert not any("Is there a shape in the image" in v.question and v.answer == NO for v in made)
    assert all(v.media_order == item.media_order for v, item in zip(made, _items(600), strict=True))


def test_free_layout_items_ask_again_about_the_new_scene():
    rng = np.random.default_rng(1)
    for item in _items(60):
        if item.scene is None:
            continue
        redrawn = free_layout_item(item, rng)
        assert redrawn.scene != item.scene
        if item.target == "image":
            assert redrawn.kind == item.kind
            assert redrawn.facts["objects"] == sorted(redrawn.scene.kinds)
            assert item.question.startswith("Looking at") == redrawn.question.startswith("Looking at")
        else:
            assert (redrawn.question, redrawn.answer) == (item.question, item.answer)
