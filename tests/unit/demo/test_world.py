"""The synthetic grounding world: seeded scenes and clips, their ground truth, and the committed golden sets."""

import shutil
from collections import Counter
from itertools import combinations

import numpy as np
import pytest

from demo.golden import (
    GOLDEN_DIR,
    HELDOUT_SEED,
    SMOKE_SEED,
    GoldenItem,
    golden_set,
    read_items,
    training_items,
    write_golden_sets,
)
from demo.speech import SAMPLE_RATE, Clip, render_clip, sample_clip
from demo.world import MAX_ASPECT, MAX_REACH, RGB, Scene, render_scene, sample_scene

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


def _scenes(seed: int, n: int) -> list[Scene]:
    rng = np.random.default_rng(seed)
    return [sample_scene(rng) for _ in range(n)]


def test_the_same_seed_gives_the_same_scenes_and_pixels():
    first, second = _scenes(5, 20), _scenes(5, 20)
    assert first == second
    assert first != _scenes(6, 20)
    for scene in first[:5]:
        assert np.array_equal(np.asarray(render_scene(scene)), np.asarray(render_scene(scene)))


def test_scenes_keep_the_layout_rules():
    scenes = _scenes(11, 300)
    assert Counter(len(s.shapes) for s in scenes).keys() == {1, 2, 3, 4}
    assert any(s.noise_sigma > 0 for s in scenes)
    assert any(s.noise_sigma == 0 for s in scenes)
    for s in scenes:
        assert 64 <= s.width <= 1024
        assert 64 <= s.height <= 1024
        assert max(s.width, s.height) / min(s.width, s.height) <= MAX_ASPECT + 0.02
        assert len(set(s.kinds)) == len(s.shapes), "a kind appears once, so 'the circle' names one shape"
        assert len({x.position for x in s.shapes}) == len(s.shapes), "one shape per position"
        for shape in s.shapes:
            reach = MAX_REACH * shape.radius
            assert reach <= shape.cx <= s.width - reach
            assert reach <= shape.cy <= s.height - reach
        for a, b in combinations(s.shapes, 2):
            gap = float(np.hypot(a.cx - b.cx, a.cy - b.cy))
            assert gap >= MAX_REACH * (a.radius + b.radius), (s, a, b)


def test_each_shape_is_drawn_in_its_colour_where_it_says():
    for scene in _scenes(3, 60):
        pixels = np.asarray(render_scene(scene))
        assert pixels.shape == (scene.height, scene.width, 3)
        for shape in scene.shapes:
            assert tuple(pixels[shape.cy, shape.cx]) == RGB[shape.colour], (scene, shape)
            # Left of centre on the left, and so on: the position word matches the pixels.
            if shape.position == "left":
                assert shape.cx < scene.width / 3
            elif shape.position == "right":
                assert shape.cx > 2 * scene.width / 3
            elif shape.position == "top":
                assert shape.cy < scene.height / 3
            elif shape.position == "bottom":
                assert shape.cy > 2 * scene.height / 3
            else:
                assert scene.width / 3 < shape.cx < 2 * scene.width / 3


def test_a_background_corner_stays_light():
    for scene in _scenes(4, 30):
        corner = np.asarray(render_scene(scene))[0, 0].astype(int)
        assert (corner >= 200).all(), corner


def test_non_speech_clips():
    rng = np.random.default_rng(1)
    beep, silence, noise = (render_clip(sample_clip(rng, kind=k)) for k in ("beep", "silence", "noise"))
    for samples in (beep, silence, noise):
        assert samples.dtype == np.float32
        assert samples.ndim == 1
        assert samples.size >= SAMPLE_RATE
    assert not silence.any()
    assert 0.02 < float(noise.std()) < 0.4
    clip = Clip(kind="beep", seconds=1.0, frequency=880.0, amplitude=0.3)
    spectrum = np.abs(np.fft.rfft(render_clip(clip)))
    assert round(float(np.argmax(spectrum)) * SAMPLE_RATE / (2 * (spectrum.size - 1))) == 880


@needs_espeak
def test_speech_is_16k_float32_and_differs_by_voice():
    slots = {"weekday": "Thursday", "hour": 3}
    clips = [Clip(kind="meeting", slots=slots, voice=v, speed=160, pitch=50) for v in ("en-us", "en-gb-x-rp", "en+m3")]
    rendered = [render_clip(c) for c in clips]
    for samples in rendered:
        assert samples.dtype == np.float32
        assert samples.ndim == 1
        assert 1.0 < samples.size / SAMPLE_RATE < 6.0
        assert 0.05 < float(np.abs(samples).max()) <= 1.0
    for a, b in combinations(rendered, 2):
        assert a.size != b.size or not np.array_equal(a, b)
    assert clips[0].text == "The meeting is on Thursday at three o'clock."
    slow = Clip(kind="meeting", slots=slots, voice="en-us", speed=130, pitch=50)
    assert render_clip(slow).size > rendered[0].size
    assert np.array_equal(render_clip(clips[0]), rendered[0])


def test_committed_golden_sets_match_their_generator():
    expected = {"heldout": True, "smoke": True, "free": True, "calibration": True}
    assert write_golden_sets(GOLDEN_DIR, check=True) == expected


def test_golden_items_round_trip_through_json(tmp_path):
    from demo.golden import write_items

    items = golden_set("smoke")
    write_items(tmp_path / "s.jsonl", items)
    assert read_items(tmp_path / "s.jsonl") == items
    assert all(isinstance(i, GoldenItem) for i in items)


def test_heldout_is_balanced_across_mixes_kinds_and_answers():
    items = read_items(GOLDEN_DIR / "heldout.jsonl")
    mixes = Counter(i.mix for i in items)
    assert mixes == {"image": 300, "audio": 300, "image+audio": 150}
    by_kind = Counter((i.target, i.kind) for i in items if i.mix != "image+audio")
    assert set(by_kind.values()) == {50}
    answers = Counter(i.facts["expected"] for i in items if i.kind == "exists")
    assert answers["yes"] == answers["no"]
    both = [i for i in items if i.mix == "image+audio"]
    assert {i.target for i in both} == {"image", "audio"}
    assert {i.media_order for i in both} == {("image", "audio"), ("audio", "image")}
    assert all(i.scene is not None and i.clip is not None for i in both)
    smoke = read_items(GOLDEN_DIR / "smoke.jsonl")
    assert {i.kind for i in smoke if i.mix == "image"} == {i.kind for i in items if i.mix == "image"}
    assert {i.kind for i in smoke if i.mix == "audio"} == {i.kind for i in items if i.mix == "audio"}


def test_training_items_are_seeded_and_never_use_a_golden_seed():
    first = list(training_items(7, count=12))
    assert first == list(training_items(7, count=12))
    assert first != list(training_items(8, count=12))
    assert {i.mix for i in first} == {"image", "audio", "image+audio"}
    heldout_scenes = {str(i.scene) for i in golden_set("heldout") if i.scene is not None}
    assert not {str(i.scene) for i in first if i.scene is not None} & heldout_scenes
    for seed in (HELDOUT_SEED, SMOKE_SEED):
        with pytest.raises(ValueError, match="golden set"):
            next(training_items(seed))
