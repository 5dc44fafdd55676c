"""What `tessera models train-demo` (demo.training.trainer) shows each stage: the vision stage's scenes, with a share
of lone shapes drawn bigger than the world draws them, and the joint stage's items, the mixes taking turns step by
step as weighted (`--mix-weights`), the question kinds weighted as asked (`--kind-weights`) and a share of the image
items asked about one big shape instead (`--lone-share`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from demo.golden import AUDIO_KINDS, IMAGE_KINDS, MEDIUM_LEAD, MIXES, GoldenItem, image_facts, image_question
from demo.world import MAX_REACH, Scene, sample_free_scene, sample_scene, world_radius


def vision_scene(rng: np.random.Generator, enlarge_share: float, free_share: float = 0.0) -> Scene:
    """A scene of the world, or, `enlarge_share` of the time, one large shape drawn up to 3 times the world's size
    (`enlarged`; a small one drawn is made large first, so every such scene shows a shape bigger than the world's).
    With `free_share`, that share of the scenes is a free layout instead (demo.world `sample_free_scene`: one to four
    shapes anywhere, up to three times the world's large size, on tinted and noisy backgrounds); without it the draws
    are the ones an earlier recipe made."""
    if free_share and rng.random() < free_share:
        return sample_free_scene(rng)
    if rng.random() >= enlarge_share:
        return sample_scene(rng)
    scene = sample_scene(rng, n_shapes=1)
    (shape,) = scene.shapes
    if shape.size == "small":
        radius = world_radius("large", scene.width, scene.height)
        shape = dataclasses.replace(shape, size="large", radius=radius)
        scene = dataclasses.replace(scene, shapes=(shape,))
    return enlarged(scene, rng)


def enlarged(scene: Scene, rng: np.random.Generator) -> Scene:
    """`scene` with its shape drawn up to 3 times the world's size (as far as its place allows) when it holds one
    large shape, else `scene` itself: pictures people bring fill more of the frame, and a shape seen whole should
    still be one shape. Its colour, kind, size and position stay, so every answer about the scene still holds."""
    if len(scene.shapes) != 1 or scene.shapes[0].size != "large":
        return scene
    (shape,) = scene.shapes
    room = min(shape.cx, shape.cy, scene.width - shape.cx, scene.height - shape.cy) / (MAX_REACH * shape.radius)
    factor = float(rng.uniform(1.0, max(1.0, min(3.0, room))))
    return dataclasses.replace(scene, shapes=(dataclasses.replace(shape, radius=round(shape.radius * factor)),))


def lone_shape_item(item: GoldenItem, rng: np.random.Generator) -> GoldenItem:
    """Image item `item` asked again about a picture of one large shape drawn up to 3 times the world's size: the
    same question kind, asked and answered about that shape. A picture filled by one shape is rare among the world's
    scenes (one in eight holds a lone large shape), yet it is the picture people most often bring."""
    if item.mix != "image":
        raise ValueError(f"only image items are redrawn, not {item.mix} ({item.id})")
    scene = vision_scene(rng, enlarge_share=1.0)
    question, answer, extra = image_question(scene, item.kind, rng, yes=bool(rng.random() < 0.5))
    return dataclasses.replace(
        item, question=question, answer=answer, facts={**image_facts(scene), **extra}, scene=scene
    )


def free_layout_item(item: GoldenItem, rng: np.random.Generator) -> GoldenItem:
    """`item` with its image redrawn as a free layout (demo.world `sample_free_scene`: shapes anywhere, up to three
    times the world's large size); a question about the image is asked again, of the same kind, about the new
    scene, and keeps its "Looking at the image, " lead."""
    if item.scene is None:
        raise ValueError(f"item {item.id} has no image to redraw")
    scene = sample_free_scene(rng)
    if item.target != "image":
        return dataclasses.replace(item, scene=scene)
    question, answer, extra = image_question(scene, item.kind, rng, yes=bool(rng.random() < 0.5))
    lead = MEDIUM_LEAD["image"]
    if item.question.startswith(lead):
        question = lead + question[0].lower() + question[1:]
    return dataclasses.replace(
        item, question=question, answer=answer, facts={**image_facts(scene), **extra}, scene=scene
    )


def weighted_items(
    items: Iterator[GoldenItem], kind_weights: tuple[tuple[str, float], ...], seed: tuple[int, ...]
) -> Iterator[GoldenItem]:
    """`items` thinned so each question kind turns up in proportion to its weight (a kind not named weighs 1):
    an item is kept with probability its kind's weight over the heaviest. Seeded, so a resumed run replays it."""
    weights = dict(kind_weights)
    if not weights:
        yield from items
        return
    if any(w <= 0 for w in weights.values()):
        raise ValueError(f"kind weights must be positive, got {weights}")
    unknown = set(weights) - set(IMAGE_KINDS) - set(AUDIO_KINDS)
    if unknown:
        raise ValueError(f"unknown question kinds {sorted(unknown)}; kinds are {IMAGE_KINDS + AUDIO_KINDS}")
    heaviest = max(1.0, *weights.values())
    rng = np.random.default_rng(list(seed))
    for item in items:
        if rng.random() < weights.get(item.kind, 1.0) / heaviest:
            yield item


def mix_turns(weights: dict[str, int]) -> tuple[str, ...]:
    """The joint stage's turns for whole-number mix weights, spread out (`{"image": 2, "audio": 1}` gives image,
    audio, image): each turn goes to the mix furthest behind its share."""
    unknown = set(weights) - set(MIXES)
    if unknown:
        raise ValueError(f"unknown mixes {sorted(unknown)}; mixes are {list(MIXES)}")
    if any(w < 0 for w in weights.values()) or not any(weights.values()):
        raise ValueError(f"mix weights must be whole numbers, 0 or more, not all 0; got {weights}")
    total = sum(weights.values())
    turns: list[str] = []
    for n in range(1, total + 1):
        due = {m: w * n / total - turns.count(m) for m, w in weights.items() if w}
        turns.append(max(MIXES, key=lambda m: due.get(m, float("-inf"))))
    return tuple(turns)


def _pairs(text: str) -> list[tuple[str, str, str]]:
    """`"a=1, b=2"` as (name, value, part) triples; a part without "=" or a name gives an empty name."""
    pairs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        pairs.append((name.strip() if sep else "", value.strip(), part))
    return pairs


def parse_kind_weights(text: str) -> tuple[tuple[str, float], ...]:
    """`"describe=3,which_shapes=2"` as (kind, weight) pairs."""
    pairs = []
    for kind, weight, part in _pairs(text):
        try:
            value = float(weight)
        except ValueError:
            value = float("nan")
        if not kind or not value > 0:
            raise ValueError(f"expected kind=weight with a positive weight, got {part!r}")
        pairs.append((kind, value))
    return tuple(pairs)


def parse_mix_weights(text: str) -> tuple[str, ...]:
    """`"image=4,audio=1,image+audio=3"` as the joint stage's turns (`mix_turns`)."""
    weights: dict[str, int] = {}
    for mix, weight, part in _pairs(text):
        if not mix or not weight.isdigit():
            raise ValueError(f"expected mix=weight with a whole-number weight, got {part!r}")
        weights[mix] = int(weight)
    return mix_turns(weights)
