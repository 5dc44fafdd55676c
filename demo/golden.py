"""Golden items of the grounding world: questions with reference answers and facts, their sets, and training items.

An item asks one question about one medium (its `target`) of a request carrying an image, a clip, or both
(`mix`). It stores the scene and clip specs, not pixels or samples: `GoldenItem.image()` and `.audio()` render
them again (see demo.world and demo.speech).

Seeds. Item `i` of a set is drawn from `numpy.random.default_rng([set_seed, mix_index, i])`, so any item is
regenerated from the set seed alone. The committed sets use seeds that training must never use:
- `HELDOUT_SEED` (20261211): demo/golden/heldout.jsonl, 300 image, 300 audio and 150 image+audio items;
- `SMOKE_SEED` (20261212): demo/golden/smoke.jsonl, 6 image (one per kind), 6 audio and 2 image+audio
  items, for `--smoke` runs;
- `FREE_SEED` (20261213): demo/golden/free.jsonl, 200 items per mix whose images are free layouts (shapes
  anywhere, of any size up to three times the world's large; demo.world `sample_free_scene`), fixed before any
  training saw a free layout;
- `CALIBRATION_SEED` (20261214): demo/golden/calibration.jsonl, 60 items per mix, half of the images free
  layouts: the split thresholds are chosen on, never a held-out set;
- `ROUTING_SEEDS` (20261221-20261223): the routing eval's train, dev and test splits (demo.routing_set).
`training_items(seed)` refuses them all. `tessera eval golden` rewrites the files, `--check` compares them.
Question kinds are cycled (item `i` asks kind `i mod 6`) and yes/no answers alternate, so every slice is balanced.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from demo.speech import SOUNDS, Clip, number_word, render_clip, sample_clip
from demo.world import COLOURS, SHAPES, Scene, render_scene, sample_free_scene, sample_scene
from grounding.claims import article
from grounding.questions import AUDIO_KINDS, IMAGE_KINDS

HELDOUT_SEED = 20261211
SMOKE_SEED = 20261212
FREE_SEED = 20261213
CALIBRATION_SEED = 20261214
# The routing eval's train, dev and test splits (demo.routing_set).
ROUTING_SEEDS = {"train": 20261221, "dev": 20261222, "test": 20261223}
RESERVED_SEEDS = frozenset({HELDOUT_SEED, SMOKE_SEED, FREE_SEED, CALIBRATION_SEED, *ROUTING_SEEDS.values()})
GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
MIXES = ("image", "audio", "image+audio")
LAYOUTS = ("world", "free", "mixed")  # the world's anchored layouts, free layouts, or each item either at random
# name: (seed, items per mix, layout)
SETS: dict[str, tuple[int, dict[str, int], str]] = {
    "heldout": (HELDOUT_SEED, {"image": 300, "audio": 300, "image+audio": 150}, "world"),
    "smoke": (SMOKE_SEED, {"image": 6, "audio": 6, "image+audio": 2}, "world"),
    "free": (FREE_SEED, {"image": 200, "audio": 200, "image+audio": 200}, "free"),
    "calibration": (CALIBRATION_SEED, {"image": 60, "audio": 60, "image+audio": 60}, "mixed"),
}
HELDOUT_SETS = ("heldout", "free")

IMAGE_WORDINGS: dict[str, tuple[str, ...]] = {
    "which_shapes": (
        "Which shapes are in this image?",
        "What shapes can you see?",
        "Name the shapes in the picture.",
        "What shapes are there in the image?",
    ),
    "colour_of": (
        "What colour is the {shape}?",
        "What is the colour of the {shape}?",
        "Which colour is the {shape} in the picture?",
        "Tell me the colour of the {shape}.",
    ),
    "count": (
        "How many shapes are there?",
        "How many shapes are in the image?",
        "Count the shapes in the picture.",
        "What is the number of shapes in this image?",
    ),
    "exists": (
        "Is there a {colour} {shape} in the image?",
        "Does the picture contain a {colour} {shape}?",
        "Can you see a {colour} {shape}?",
        "Is there a {colour} {shape}? Answer yes or no.",
    ),
    "where": (
        "Where is the {shape}?",
        "Where is the {shape} in the image?",
        "In which part of the picture is the {shape}?",
        "Where can the {shape} be found in this image?",
    ),
    "describe": (
        "Describe the image.",
        "What is in this picture?",
        "Describe what you see in the image.",
        "What shape and colour is in this image?",
    ),
}
AUDIO_WORDINGS: dict[str, tuple[str, ...]] = {
    "transcript": (
        "What did the speaker say?",
        "What is said in the audio?",
        "Transcribe the clip.",
        "What does the voice in the recording say?",
    ),
    "when": (
        "When is the meeting?",
        "What day and time is the meeting?",
        "On which day and at what time is the meeting?",
        "When does the meeting take place, according to the clip?",
    ),
    "who": (
        "Who should I call?",
        "Which person does the speaker ask to call?",
        "Who am I asked to call?",
        "What name does the speaker say to call?",
    ),
    "how_many": (
        "How many of what are on the table?",
        "What is on the table, and how many?",
        "How many things are on the table, and what are they?",
        "What does the speaker count on the table?",
    ),
    "favourite_colour": (
        "What is the speaker's favourite colour?",
        "Which colour does the speaker like best?",
        "What colour does the speaker say is their favourite?",
    ),
    "sound": (
        "What do you hear?",
        "What do you hear in this clip?",
        "What sound is in the audio?",
        "Describe the audio.",
    ),
}
# The sentence a clip must say for an audio question about its content; "sound" takes any clip.
SENTENCE_OF_KIND = {"when": "meeting", "who": "call", "how_many": "count", "favourite_colour": "colour"}
# In a request with both media, about half of the questions name the medium outright.
MEDIUM_LEAD = {"image": "Looking at the image, ", "audio": "Listening to the clip, "}
POSITION_PHRASE = {"left": "on the left", "right": "on the right", "top": "at the top", "bottom": "at the bottom"}
POSITION_PHRASE["centre"] = "in the centre"


@dataclass(frozen=True)
class GoldenItem:
    id: str
    seed: int
    mix: str  # "image" | "audio" | "image+audio"
    target: str  # the medium the question is about: "image" | "audio"
    kind: str
    question: str
    answer: str  # the reference answer
    facts: dict[str, Any]  # the ground truth the answer checker needs (see image_facts / audio_facts)
    scene: Scene | None = None
    clip: Clip | None = None
    media_order: tuple[str, ...] = field(default=())  # order of the media parts in the request

    def image(self) -> Any:
        if self.scene is None:
            raise ValueError(f"item {self.id} has no image")
        return render_scene(self.scene)

    def audio(self) -> np.ndarray:
        if self.clip is None:
            raise ValueError(f"item {self.id} has no audio")
        return render_clip(self.clip)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "seed": self.seed,
            "mix": self.mix,
            "target": self.target,
            "kind": self.kind,
            "question": self.question,
            "answer": self.answer,
            "facts": self.facts,
            "media_order": list(self.media_order),
            "scene": self.scene.to_dict() if self.scene else None,
            "clip": self.clip.to_dict() if self.clip else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GoldenItem:
        return cls(
            id=data["id"],
            seed=int(data["seed"]),
            mix=data["mix"],
            target=data["target"],
            kind=data["kind"],
            question=data["question"],
            answer=data["answer"],
            facts=data["facts"],
            scene=Scene.from_dict(data["scene"]) if data.get("scene") else None,
            clip=Clip.from_dict(data["clip"]) if data.get("clip") else None,
            media_order=tuple(data.get("media_order") or ()),
        )


def _join(phrases: list[str]) -> str:
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]


def image_facts(scene: Scene) -> dict[str, Any]:
    return {
        "objects": sorted(scene.kinds),
        "colours": {s.kind: s.colour for s in scene.shapes},
        "positions": {s.kind: s.position for s in scene.shapes},
        "sizes": {s.kind: s.size for s in scene.shapes},
        "count": len(scene.shapes),
    }


def audio_facts(clip: Clip) -> dict[str, Any]:
    objects = [clip.slots["noun"], "table"] if clip.kind == "count" else []
    return {"sound": "speech" if clip.is_speech else clip.kind, "sentence": clip.text, "objects": objects, **clip.slots}


def image_question(scene: Scene, kind: str, rng: np.random.Generator, yes: bool) -> tuple[str, str, dict[str, Any]]:
    """(question, reference answer, extra facts) for one image question."""
    wording = IMAGE_WORDINGS[kind][int(rng.integers(len(IMAGE_WORDINGS[kind])))]
    shape = scene.shapes[int(rng.integers(len(scene.shapes)))]
    if kind == "which_shapes":
        return wording, _join([f"{article(s.colour)} {s.colour} {s.kind}" for s in scene.shapes]).capitalize() + ".", {}
    if kind == "colour_of":
        return wording.format(shape=shape.kind), f"The {shape.kind} is {shape.colour}.", {"shape": shape.kind}
    if kind == "count":
        n = len(scene.shapes)
        return wording, f"There {'is' if n == 1 else 'are'} {number_word(n)} shape{'s' * (n != 1)}.", {}
    if kind == "exists":
        kind_asked, colour = shape.kind, shape.colour
        if not yes:
            absent = [k for k in SHAPES if k not in scene.kinds]
            # Half of the "no" questions name a shape that is there, in another colour: binding, not presence.
            if absent and rng.random() < 0.5:
                kind_asked = absent[int(rng.integers(len(absent)))]
                colour = COLOURS[int(rng.integers(len(COLOURS)))]
            else:
                others = [c for c in COLOURS if c != shape.colour]
                colour = others[int(rng.integers(len(others)))]
        a = article(colour)
        answer = f"Yes, there is {a} {colour} {kind_asked}." if yes else f"No, there is no {colour} {kind_asked}."
        facts = {"shape": kind_asked, "colour": colour, "expected": "yes" if yes else "no"}
        return wording.replace("a {colour}", f"{a} {{colour}}").format(shape=kind_asked, colour=colour), answer, facts
    if kind == "where":
        return (
            wording.format(shape=shape.kind),
            f"The {shape.kind} is {POSITION_PHRASE[shape.position]}.",
            {"shape": shape.kind},
        )
    parts = [f"{s.phrase()} {POSITION_PHRASE[s.position]}" for s in scene.shapes]
    return wording, f"The image shows {_join(parts)}, on a light background.", {}


def _audio_question(clip: Clip, kind: str, rng: np.random.Generator) -> tuple[str, str]:
    wording = AUDIO_WORDINGS[kind][int(rng.integers(len(AUDIO_WORDINGS[kind])))]
    s = clip.slots
    if kind == "transcript":
        return wording, f'The speaker says: "{clip.text}"'
    if kind == "when":
        return wording, f"The meeting is on {s['weekday']} at {number_word(s['hour'])} o'clock."
    if kind == "who":
        return wording, f"You should call {s['name']}."
    if kind == "how_many":
        return wording, f"There are {number_word(s['count'])} {s['noun']} on the table."
    if kind == "favourite_colour":
        return wording, f"The speaker's favourite colour is {s['colour']}."
    sound_answers = {
        "beep": "A beep: a pure tone.",
        "silence": "Silence: there is no sound.",
        "noise": "White noise, a steady hiss.",
    }
    return wording, sound_answers.get(clip.kind, f'A voice saying: "{clip.text}"')


def _clip_for(kind: str, rng: np.random.Generator) -> Clip:
    if kind in SENTENCE_OF_KIND:
        return sample_clip(rng, kind=SENTENCE_OF_KIND[kind])
    if kind == "transcript":
        return sample_clip(rng, speech_share=1.0)
    # "what do you hear": half speech, half one of the sounds.
    return sample_clip(rng, kind=None if rng.random() < 0.5 else SOUNDS[int(rng.integers(len(SOUNDS)))])


def draw_scene(rng: np.random.Generator, layout: str) -> Scene:
    """A scene of `layout` (LAYOUTS); "mixed" draws a free layout half of the time."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    free = layout == "free" or (layout == "mixed" and rng.random() < 0.5)
    return sample_free_scene(rng) if free else sample_scene(rng)


def make_item(item_id: str, seed: int, mix: str, index: int, layout: str = "world") -> GoldenItem:
    """Item `index` of its mix: the question kind cycles with `index`, the rest is drawn from `seed`; its image
    (if any) is a scene of `layout`."""
    if mix not in MIXES:
        raise ValueError(f"mix must be one of {MIXES}, not {mix!r}")
    rng = np.random.default_rng(seed)
    target = mix if mix != "image+audio" else ("image", "audio")[index % 2]
    kinds = IMAGE_KINDS if target == "image" else AUDIO_KINDS
    kind = kinds[(index // (2 if mix == "image+audio" else 1)) % len(kinds)]
    yes = (index // (len(kinds) * (2 if mix == "image+audio" else 1))) % 2 == 0
    scene = draw_scene(rng, layout) if "image" in mix else None
    clip = _clip_for(kind, rng) if target == "audio" else (sample_clip(rng) if "audio" in mix else None)
    facts: dict[str, Any] = {}
    if target == "image" and scene is not None:
        question, answer, extra = image_question(scene, kind, rng, yes)
        facts = {**image_facts(scene), **extra}
    elif clip is not None:
        question, answer = _audio_question(clip, kind, rng)
        facts = audio_facts(clip)
    order: tuple[str, ...]
    if mix == "image+audio":
        order = ("image", "audio") if rng.random() < 0.5 else ("audio", "image")
        if rng.random() < 0.5:
            question = MEDIUM_LEAD[target] + question[0].lower() + question[1:]
    else:
        order = (mix,)
    return GoldenItem(item_id, seed, mix, target, kind, question, answer, facts, scene, clip, order)


def _item_seed(set_seed: int, mix: str, index: int) -> int:
    return int(np.random.SeedSequence([set_seed, MIXES.index(mix), index]).generate_state(1)[0])


def generate_items(set_seed: int, counts: dict[str, int], prefix: str, layout: str = "world") -> list[GoldenItem]:
    items: list[GoldenItem] = []
    for mix, count in counts.items():
        tag = mix.replace("image", "img").replace("audio", "aud").replace("+", "")
        items.extend(
            make_item(f"{prefix}-{tag}-{i:04d}", _item_seed(set_seed, mix, i), mix, i, layout) for i in range(count)
        )
    return items


def training_items(seed: int, mixes: tuple[str, ...] = MIXES, count: int | None = None) -> Iterator[GoldenItem]:
    """Training items drawn from `seed` (never a golden set's seed), mixes interleaved; endless unless `count`."""
    if seed in RESERVED_SEEDS:
        raise ValueError(f"seed {seed} generates a golden set; training on it would leak the held-out answers")
    index = 0
    while count is None or index < count:
        mix = mixes[index % len(mixes)]
        per_mix = index // len(mixes)
        yield make_item(f"train{seed}-{index}", _item_seed(seed, mix, per_mix), mix, per_mix)
        index += 1


def golden_set(name: str) -> list[GoldenItem]:
    seed, counts, layout = SETS[name]
    return generate_items(seed, counts, name, layout)


def write_items(path: Path, items: list[GoldenItem]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(item.to_dict(), ensure_ascii=False, separators=(",", ":")) for item in items]
    path.write_text("\n".join(lines) + "\n")


def read_items(path: Path) -> list[GoldenItem]:
    items: list[GoldenItem] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                items.append(GoldenItem.from_dict(json.loads(line)))
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{number}: not a golden item ({exc})") from exc
    return items


def write_golden_sets(out_dir: Path = GOLDEN_DIR, *, check: bool = False) -> dict[str, bool]:
    """Writes every committed set (or, with `check`, says per set whether the file matches its generator)."""
    result = {}
    for name in SETS:
        path = out_dir / f"{name}.jsonl"
        items = golden_set(name)
        if check:
            result[name] = path.is_file() and [i.to_dict() for i in read_items(path)] == [i.to_dict() for i in items]
        else:
            write_items(path, items)
            result[name] = True
    return result
