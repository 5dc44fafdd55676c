"""What the training stages are shown (demo.training.curriculum, and the joint stage's batches as the Trainer draws
them): weighted question kinds, the joint stage's mix turns, lone shapes drawn bigger than the world draws them,
and image items asked about one big shape instead."""

from __future__ import annotations

from itertools import islice

import numpy as np
import pytest

from demo.answers import check_answer
from demo.golden import IMAGE_KINDS, GoldenItem, training_items
from demo.training import curriculum
from demo.training.config import TrainConfig
from demo.training.curriculum import enlarged, mix_turns, parse_kind_weights, vision_scene, weighted_items
from demo.training.trainer import Trainer
from demo.world import MAX_REACH, RADIUS_FRACTION, Scene, Shape, sample_free_scene


def _scene() -> Scene:
    shapes = (
        Shape("circle", "red", "large", "left", cx=50, cy=100, radius=45),
        Shape("star", "blue", "small", "right", cx=350, cy=100, radius=12),
    )
    return Scene(400, 200, (250, 250, 250), 0.0, 0, shapes)


def _drawn(weights: tuple[tuple[str, float], ...], n: int) -> list[GoldenItem]:
    return list(islice(weighted_items(training_items(5, ("image",)), weights, (1, 0)), n))


def test_kind_weights_lean_the_joint_items_towards_the_heavy_kinds_and_keep_the_rest():
    weights = (("describe", 3.0), ("colour_of", 0.5))
    drawn = [item.kind for item in _drawn(weights, 600)]
    share = {kind: drawn.count(kind) / len(drawn) for kind in IMAGE_KINDS}
    # drawn in turn, each kind is kept in proportion to its weight: 3 / 7.5 for describe, 0.5 / 7.5 for colour_of
    assert share["describe"] == pytest.approx(3 / 7.5, abs=0.06)
    assert share["colour_of"] == pytest.approx(0.5 / 7.5, abs=0.04)
    assert share["count"] == pytest.approx(1 / 7.5, abs=0.05)
    assert [i.id for i in _drawn(weights, 50)] == [i.id for i in _drawn(weights, 50)]
    assert [item.kind for item in _drawn((), 12)] == list(IMAGE_KINDS) * 2


def test_kind_weights_are_read_from_the_command_line_and_bad_ones_are_refused():
    assert parse_kind_weights("describe=3, which_shapes=2") == (("describe", 3.0), ("which_shapes", 2.0))
    for bad in ("describe", "describe=0", "describe=x", "=2"):
        with pytest.raises(ValueError, match="kind=weight"):
            parse_kind_weights(bad)
    with pytest.raises(ValueError, match="unknown question kinds"):
        next(weighted_items(training_items(5, ("image",)), (("painting", 2.0),), (1, 0)))


def test_a_lone_large_shape_is_drawn_bigger_inside_the_frame_and_keeps_its_facts():
    rng = np.random.default_rng(3)
    lone = Scene(320, 240, (255, 255, 255), 0.0, 0, (Shape("circle", "red", "large", "centre", 160, 120, 26),))
    drawn = [enlarged(lone, rng) for _ in range(40)]
    radii = [scene.shapes[0].radius for scene in drawn]
    assert min(radii) >= 26
    assert max(radii) > 60  # up to 3 times, as far as the centre's room allows (3.85)
    for scene in drawn:
        (shape,) = scene.shapes
        assert (shape.kind, shape.colour, shape.size, shape.position) == ("circle", "red", "large", "centre")
        assert MAX_REACH * shape.radius <= min(shape.cx, shape.cy, 320 - shape.cx, 240 - shape.cy) + 1
    small = Scene(320, 240, (255, 255, 255), 0.0, 0, (Shape("star", "blue", "small", "left", 40, 120, 13),))
    assert enlarged(small, rng) is small
    assert enlarged(_scene(), rng) == _scene()


def test_mix_turns_spread_each_mix_over_the_round_by_its_weight():
    assert mix_turns({"image": 3, "audio": 3, "image+audio": 2}) == (
        "image", "audio", "image+audio", "image", "audio", "image+audio", "image", "audio"
    )  # fmt: skip
    turns = mix_turns({"image": 5, "audio": 1, "image+audio": 2})
    assert sorted(turns) == sorted(["image"] * 5 + ["audio"] + ["image+audio"] * 2)
    assert "image, image, image" not in ", ".join(turns)  # spread out, not bunched
    assert mix_turns({"audio": 1, "image": 0}) == ("audio",)
    assert TrainConfig().joint_mix == mix_turns({"image": 3, "audio": 3, "image+audio": 2})


def test_the_vision_stage_draws_its_enlarged_share_as_one_large_shape_often_well_past_the_worlds_size():
    rng = np.random.default_rng(5)
    scenes = [vision_scene(rng, 1.0) for _ in range(400)]
    factors = []
    for scene in scenes:
        (shape,) = scene.shapes
        assert shape.size == "large"
        assert MAX_REACH * shape.radius <= min(shape.cx, shape.cy, scene.width - shape.cx, scene.height - shape.cy) + 1
        factors.append(shape.radius / (RADIUS_FRACTION["large"] * min(scene.width, scene.height)))
    assert min(factors) > 0.9  # radii are whole pixels
    assert sum(f > 2.3 for f in factors) >= 20  # a shape filling much of the frame is no rarity
    plain = [vision_scene(rng, 0.0) for _ in range(100)]
    assert any(len(scene.shapes) > 1 for scene in plain)
    assert any(shape.size == "small" for scene in plain for shape in scene.shapes)


def test_a_vision_pass_over_free_layouts_keeps_the_worlds_scenes_beside_them(monkeypatch):
    # no share: the draws an earlier recipe made
    assert vision_scene(np.random.default_rng(9), 0.25) == vision_scene(np.random.default_rng(9), 0.25, 0.0)
    drawn = []

    def free(rng):
        drawn.append(sample_free_scene(rng))
        return drawn[-1]

    monkeypatch.setattr(curriculum, "sample_free_scene", free)
    rng = np.random.default_rng(9)
    scenes = [vision_scene(rng, 0.25, 0.5) for _ in range(400)]
    assert 150 <= len(drawn) <= 250
    assert {len(s.shapes) for s in drawn} == {1, 2, 3, 4}
    world = [s for s in scenes if all(s is not d for d in drawn)]
    assert len(world) == 400 - len(drawn)
    assert any(len(s.shapes) > 1 for s in world)


def test_joint_items_follow_the_mix_turns():
    trainer = Trainer.__new__(Trainer)
    trainer.config = TrainConfig(batch=2, joint_mix=mix_turns({"image": 2, "audio": 1}), joint_enlarge_share=0.0)
    trainer.items = {mix: training_items(2, mixes=(mix,)) for mix in set(trainer.config.joint_mix)}
    assert [trainer._joint_items(step)[0].mix for step in range(6)] == ["image", "audio", "image"] * 2


def _joint_trainer(share: float, lone: float = 0.0) -> Trainer:
    """A Trainer holding only what drawing joint items needs (no model)."""
    trainer = Trainer.__new__(Trainer)
    trainer.config = TrainConfig(batch=8, joint_enlarge_share=share, joint_lone_share=lone)
    trainer.items = {mix: training_items(2, mixes=(mix,)) for mix in set(trainer.config.joint_mix)}
    return trainer


def test_joint_items_draw_lone_large_shapes_bigger_and_replay_when_seeded():
    plain, bigger, again = _joint_trainer(0.0), _joint_trainer(1.0), _joint_trainer(1.0)
    grown = 0
    for step in range(48):
        before, after = plain._joint_items(step), bigger._joint_items(step)
        assert [i.id for i in after] == [i.id for i in before]
        assert after == again._joint_items(step)
        for old, new in zip(before, after, strict=True):
            assert (old.question, old.answer, old.facts) == (new.question, new.answer, new.facts)
            lone_large = old.scene is not None and len(old.scene.shapes) == 1 and old.scene.shapes[0].size == "large"
            if not lone_large:
                assert new.scene == old.scene
            elif new.scene != old.scene:
                assert new.scene is not None
                assert new.scene.shapes[0].radius > old.scene.shapes[0].radius
                grown += 1
    assert grown >= 10


def test_the_lone_share_asks_image_items_about_one_big_shape_and_leaves_the_rest():
    plain, lone = _joint_trainer(0.75), _joint_trainer(0.75, lone=0.5)
    redrawn = 0
    for step in range(24):
        before, after = plain._joint_items(step), lone._joint_items(step)
        assert [(i.id, i.kind) for i in after] == [(i.id, i.kind) for i in before]
        for old, new in zip(before, after, strict=True):
            if old.mix != "image":
                assert new == old
            elif new != old:
                redrawn += 1
                assert new.scene is not None
                assert len(new.scene.shapes) == 1
                (shape,) = new.scene.shapes
                assert shape.size == "large"
                assert new.facts["count"] == 1
                assert new.facts["objects"] == [shape.kind]
                # the answer is about the new shape: checked as the eval checks a served answer
                assert check_answer(new, new.answer).correct
    assert redrawn >= 10
