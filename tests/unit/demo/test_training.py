"""The training recipe's pure parts: cell labels from a scene, LoRA merging, and fitting trained weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from demo.grounded_weights import apply_grounding, merge_lora
from demo.speech import SENTENCE_FORMS, Clip, render_clip, sample_clip
from demo.training.stage_losses import (
    ATTRIBUTES,
    LABELS,
    WordTargets,
    audio_stage_loss,
    cell_coordinates,
    cell_labels,
    centre_cell,
    clip_words,
    covered_cells,
    ctc_alignment,
    ctc_vocabulary,
    describe_label,
    image_stage_loss,
    label_of,
    speaks_from_cover,
    word_logits,
)
from demo.training.thinker import prompt_text
from demo.training.trainer import TrainConfig, Trainer
from demo.world import COLOURS, SHAPES, Scene, Shape


def _scene() -> Scene:
    shapes = (
        Shape("circle", "red", "large", "left", cx=50, cy=100, radius=45),
        Shape("star", "blue", "small", "right", cx=350, cy=100, radius=12),
    )
    return Scene(400, 200, (250, 250, 250), 0.0, 0, shapes)


def test_labels_name_every_shape_and_colour_once():
    seen = {label_of(s, c) for s in SHAPES for c in COLOURS}
    assert seen == set(range(1, LABELS))
    assert describe_label(label_of("star", "purple")) == ("star", "purple")
    assert describe_label(0) is None


def test_cells_under_a_shape_carry_its_label_and_the_rest_are_empty():
    cells = cell_labels(_scene(), rows=4, cols=8)  # 50 px cells
    assert cells[1, 0] == label_of("circle", "red")  # (25, 75) is 35 px from the centre: within 0.9 r
    assert cells[2, 7] == label_of("star", "blue")  # covers no cell's centre, but holds its own centre
    assert (cells == label_of("star", "blue")).sum() == 1
    assert cells[0, 3] == 0
    assert set(cells.reshape(-1).tolist()) <= {0, label_of("circle", "red"), label_of("star", "blue")}


def test_the_prompt_is_the_served_template_with_the_image_first():
    text = prompt_text("What colour is the star?", "Blue.")
    assert text.startswith("<|im_start|>system\n")
    assert "<|im_start|>user\n<|vision_start|><|IMAGE|><|vision_end|>What colour is the star?<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\nBlue.<|im_end|>")


def test_merging_lora_adds_the_scaled_low_rank_update():
    weight = torch.randn(6, 4)
    a, b = torch.randn(2, 4), torch.randn(6, 2)
    state = {"thinker.model.layers.3.self_attn.q_proj.weight": weight.clone()}
    merge_lora(state, {"lora.3.q_proj.a": a, "lora.3.q_proj.b": b}, scale=2.0)
    x = torch.randn(5, 4)
    merged = state["thinker.model.layers.3.self_attn.q_proj.weight"]
    assert torch.allclose(x @ merged.t(), x @ weight.t() + 2.0 * (x @ a.t() @ b.t()), atol=1e-5)
    with pytest.raises(RuntimeError, match="does not fit"):
        merge_lora(state, {"lora.9.q_proj.a": a, "lora.9.q_proj.b": b}, scale=1.0)


def test_trained_weights_must_fit_the_whole_tower(tmp_path):
    state = {"thinker.visual.w": torch.zeros(2, 2), "thinker.visual.b": torch.zeros(2)}
    partial = tmp_path / "partial.safetensors"
    save_file({"thinker.visual.w": torch.ones(2, 2)}, str(partial), metadata={"lora_scale": "2.0"})
    with pytest.raises(RuntimeError, match="does not fit"):
        apply_grounding(dict(state), partial)
    whole = tmp_path / "whole.safetensors"
    save_file(
        {"thinker.visual.w": torch.ones(2, 2), "thinker.visual.b": torch.ones(2)},
        str(whole),
        metadata={"lora_scale": "2.0"},
    )
    head, metadata = apply_grounding(state, whole)
    assert head == {}
    assert metadata == {"labels": "[]"}
    assert torch.equal(state["thinker.visual.b"], torch.ones(2))


def test_a_shape_is_read_at_the_cell_holding_its_centre():
    scene = _scene()
    assert centre_cell(scene, scene.shapes[0], rows=4, cols=8) == 2 * 8 + 1  # (50, 100): row 2, column 1
    assert centre_cell(scene, scene.shapes[1], rows=4, cols=8) == 2 * 8 + 7
    coords = cell_coordinates(2, 4)
    assert coords.shape == (8, 2)
    assert coords[0].tolist() == [0.25, 0.125]
    assert coords[-1].tolist() == [0.75, 0.875]


def test_clips_are_spelt_in_the_ctc_vocabulary():
    vocabulary = ctc_vocabulary()
    assert len(set(vocabulary)) == len(vocabulary)
    speech = Clip("meeting", {"weekday": "Thursday", "hour": 3})
    assert clip_words(speech) == ["the", "meeting", "is", "on", "thursday", "at", "three", "o'clock"]
    assert clip_words(Clip("beep", seconds=1.0, frequency=440.0, amplitude=0.5)) == ["beep"]
    assert {w for c in (speech, Clip("noise"), Clip("silence")) for w in clip_words(c)} <= set(vocabulary)


def test_a_clip_said_in_another_form_wants_only_the_worlds_words():
    moved = Clip("meeting", {"weekday": "Thursday", "hour": 3}, form=1, gap=2)
    assert moved.text == "The meeting is moved to Thursday at three o'clock."
    assert clip_words(moved) == ["the", "meeting", "is", "thursday", "at", "three", "o'clock"]
    assert clip_words(Clip("call", {"name": "Emma"}, form=2)) == ["please", "call", "emma"]
    assert Clip.from_dict(moved.to_dict()) == moved
    # the world's own form keeps the dictionary it always had, so golden files read as they did
    assert "form" not in Clip("call", {"name": "Emma"}).to_dict()
    for kind, forms in SENTENCE_FORMS.items():
        slots = {"weekday": "Monday", "hour": 1, "name": "Mary", "count": 2, "noun": "cups", "colour": "red"}
        world = clip_words(Clip(kind, slots))
        slot_words = {"monday", "one", "mary", "two", "cups", "red"} & set(world)
        for form in range(len(forms)):
            words = clip_words(Clip(kind, slots, form=form))
            assert set(words) <= set(world), (kind, form)
            assert slot_words <= set(words), (kind, form)


def test_varied_clips_come_only_when_asked_and_leave_plain_draws_as_they_were():
    plain = [sample_clip(np.random.default_rng(s)) for s in range(40)]
    assert all(c.form == 0 and c.gap == 0 for c in plain)
    assert plain == [sample_clip(np.random.default_rng(s), variety=0.0) for s in range(40)]
    varied = [sample_clip(np.random.default_rng(s), variety=1.0) for s in range(40)]
    speech = [c for c in varied if c.is_speech]
    assert {c.form for c in speech} > {0}
    assert {c.gap for c in speech} > {0}
    assert len(render_clip(next(c for c in speech if c.gap))) > 0


class _Words:
    """A stand-in for the text model's word embeddings: word i is the i-th unit vector."""

    shape_vector = WordTargets.shape_vector

    def __init__(self) -> None:
        self.norm = 1.0
        basis = torch.eye(64)
        at = 0
        self.attribute_vectors = {}
        for name, words in ATTRIBUTES.items():
            self.attribute_vectors[name] = basis[at : at + len(words)]
            at += len(words)
        self.vocabulary = ctc_vocabulary()
        self.index = {w: i + 1 for i, w in enumerate(self.vocabulary)}
        self.word_vectors = torch.cat([torch.zeros(1, 64), torch.eye(len(self.vocabulary), 64)])


def _heads() -> dict:
    torch.manual_seed(0)
    return {"label": torch.nn.Linear(64, LABELS), "coordinates": torch.nn.Linear(64, 2)}


def test_the_vision_loss_is_lowest_when_the_centre_token_carries_its_words():
    scene = _scene()
    words = _Words()
    grid = torch.tensor([[1, 8, 16]])  # 4 x 8 merged cells
    right = torch.zeros(32, 64)
    for shape in scene.shapes:
        right[centre_cell(scene, shape, 4, 8)] = words.shape_vector(shape)
    wrong = right.clone()
    wrong[centre_cell(scene, scene.shapes[0], 4, 8)] = right[centre_cell(scene, scene.shapes[1], 4, 8)]
    config = TrainConfig()
    loss_right, stats = image_stage_loss(right, [scene], grid, words, _heads(), config)
    loss_wrong, stats_wrong = image_stage_loss(wrong, [scene], grid, words, _heads(), config)
    assert stats["colour accuracy"] == stats["position accuracy"] == 1.0
    assert stats["centre error"] == stats["empty error"] == 0.0
    assert stats_wrong["colour accuracy"] == 0.5
    assert float(loss_right) < float(loss_wrong)
    noisy = right.clone()
    noisy[0] += 1.0  # an empty cell that is not zero costs
    assert float(image_stage_loss(noisy, [scene], grid, words, _heads(), config)[0]) > float(loss_right)


def test_a_shape_drawn_far_bigger_than_the_worlds_speaks_from_every_cell_it_covers_when_asked_to():
    scene = _scene()  # the circle's radius, 45, is 2.05 times the world's large radius here (22); the star's is not
    words = _Words()
    grid = torch.tensor([[1, 8, 16]])
    circle, star = scene.shapes
    assert speaks_from_cover(scene, circle, 1.5)
    assert not speaks_from_cover(scene, star, 1.5)
    assert not speaks_from_cover(scene, circle, 0.0)
    assert not speaks_from_cover(scene, circle, 2.5)
    covered = covered_cells(scene, circle, 4, 8)
    assert centre_cell(scene, circle, 4, 8) in covered
    assert len(covered) > 1
    assert covered == [
        c for c, label in enumerate(cell_labels(scene, 4, 8).reshape(-1)) if label == label_of("circle", "red")
    ]
    centre_only = torch.zeros(32, 64)
    for shape in scene.shapes:
        centre_only[centre_cell(scene, shape, 4, 8)] = words.shape_vector(shape)
    spoken = centre_only.clone()
    spoken[covered] = words.shape_vector(circle)
    spread, alone = TrainConfig(spread_beyond=1.5), TrainConfig()
    loss = {
        (tokens, name): float(image_stage_loss(t, [scene], grid, words, _heads(), config)[0])
        for tokens, t in (("centre only", centre_only), ("spoken", spoken))
        for name, config in (("spread", spread), ("alone", alone))
    }
    assert loss["spoken", "spread"] < loss["centre only", "spread"]
    assert loss["centre only", "alone"] < loss["spoken", "alone"]
    stats = image_stage_loss(spoken, [scene], grid, words, _heads(), spread)[1]
    assert stats["centre error"] == stats["empty error"] == 0.0  # exactly on target


def test_the_ctc_path_spells_the_words_with_blanks_between():
    # 6 frames, classes 0 (blank), 1, 2: the frames favour 1 at t=1 and 2 at t=4
    probs = torch.full((6, 3), 0.1)
    probs[:, 0] = 0.8
    probs[1] = torch.tensor([0.1, 0.8, 0.1])
    probs[4] = torch.tensor([0.1, 0.1, 0.8])
    path = ctc_alignment(probs.log().numpy(), [1, 2])
    assert path == [0, 1, 0, 0, 2, 0]
    # the same word twice needs a blank between; the path still spells both
    twice = ctc_alignment(probs.log().numpy(), [1, 1])
    assert [k for i, k in enumerate(twice) if k and (i == 0 or twice[i - 1] != k)] == [1, 1]
    assert ctc_alignment(probs[:2].log().numpy(), [1, 1, 1]) == [0, 0]  # cannot fit: all blank


def test_the_audio_loss_reads_the_words_off_the_tokens_and_pulls_them_onto_the_words():
    words = _Words()
    clip = Clip("call", {"name": "Emma"})
    spoken = clip_words(clip)  # please, call, emma
    tokens = torch.zeros(8, 64)
    for i, word in enumerate(spoken):
        tokens[2 * i + 1] = words.word_vectors[words.index[word]]
    config = TrainConfig()
    loss, stats = audio_stage_loss(tokens, torch.tensor([8]), [clip], words, config)
    assert stats["clip accuracy"] == 1.0
    assert stats["token error"] == 0.0
    other = Clip("call", {"name": "Mary"})
    loss_other, stats_other = audio_stage_loss(tokens, torch.tensor([8]), [other], words, config)
    assert stats_other["clip accuracy"] == 0.0
    assert stats_other["token error"] > 0.0
    assert float(loss) < float(loss_other)


def test_a_token_reads_as_the_nearest_word_even_among_close_neighbours():
    # two number words whose embeddings are 0.9 alike, as the text model's are: a token a little nearer one of them
    # reads as that one by a clear margin at the default temperature, and a token at zero reads as the blank
    words = _Words()
    six, seven = words.index["six"], words.index["seven"]
    base = torch.zeros(64)
    base[0] = 3.0
    words.word_vectors[six] = base + torch.eye(64)[1]
    words.word_vectors[seven] = base + torch.eye(64)[2]
    words.norm = float(words.word_vectors[six].norm())
    token = words.word_vectors[six] * 0.95 + words.word_vectors[seven] * 0.05
    logits = word_logits(torch.stack([token, torch.zeros(64)]), words, TrainConfig().ctc_temperature)
    assert int(logits[0].argmax()) == six
    assert float(logits[0, six] - logits[0, seven]) > 3.0
    assert int(logits[1].argmax()) == 0


def test_the_lineage_of_weights_lists_the_runs_behind_them_newest_first(tmp_path):
    import json

    from demo.training.output import lineage_of

    weights = tmp_path / "large-grounding.safetensors"
    assert lineage_of(weights) == []
    older = {"config": {"steps": 900}, "weights_sha256": "aa", "final": {"step": 3000}}
    manifest = {"config": {"steps": 300}, "weights_sha256": "bb", "final": {"step": 1050}, "lineage": [older]}
    weights.with_suffix(".json").write_text(json.dumps(manifest))
    runs = lineage_of(weights)
    assert [r["weights_sha256"] for r in runs] == ["bb", "aa"]
    assert runs[0]["config"] == {"steps": 300}
    assert runs[0]["last_50"] is None  # not recorded
    merged = {**manifest, "merged": "the audio tower is another run's", "audio_tower_from": {"weights_sha256": "cc"}}
    weights.with_suffix(".json").write_text(json.dumps(merged))
    runs = lineage_of(weights)
    assert runs[0]["merged"] == "the audio tower is another run's"
    assert runs[0]["audio_tower_from"] == {"weights_sha256": "cc"}
    assert "lineage" not in runs[0]


class _Tower:
    """A stand-in for the trainer around the audio tower: the tower's tokens are its projection of fixed features,
    ten of them words (unit vectors) and forty the quiet frames between words."""

    def __init__(self, loudness: float) -> None:
        from types import SimpleNamespace

        self.config = TrainConfig()
        self.targets = _Words()
        proj = torch.nn.Linear(64, 64)
        with torch.no_grad():
            proj.weight.copy_(torch.eye(64) * loudness)
            proj.bias.zero_()
        self.thinker = SimpleNamespace(audio_tower=SimpleNamespace(proj=proj))
        self.features = torch.cat([self.targets.word_vectors[1:11], torch.zeros(40, 64)])
        self.said: list[str] = []

    def progress(self, line: str) -> None:
        self.said.append(line)

    def _audio_inputs(self, clips):
        return None

    def _audio_tokens(self, inputs):
        return self.thinker.audio_tower.proj(self.features), torch.tensor([50])


@pytest.mark.parametrize(("loudness", "factor"), [(1.0, 1.0), (3.0, 1 / 3)])
def test_starting_weights_speak_words_at_word_length_counting_only_the_words(loudness, factor):
    # the quiet frames between words are most tokens: counted too, well-fitted weights would be made 5 times louder
    tower = _Tower(loudness)
    Trainer.fit_audio_length(tower)
    weight = tower.thinker.audio_tower.proj.weight
    assert torch.allclose(weight, torch.eye(64) * loudness * factor, atol=1e-5)
    assert "scaled by" in tower.said[-1]


def test_starting_weights_too_quiet_to_read_are_left_alone():
    tower = _Tower(0.1)  # every token nearer zero than any word: all read as blanks
    Trainer.fit_audio_length(tower)
    assert torch.allclose(tower.thinker.audio_tower.proj.weight, torch.eye(64) * 0.1)
    assert "left as they are" in tower.said[-1]


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--enlarge-share", "1.5", "--enlarge-share must lie in"),
        ("--enlarge-share", "-0.1", "--enlarge-share must lie in"),
        ("--spread-beyond", "-1", "--spread-beyond must be 0 or more"),
        ("--lr", "0", "--lr must lie in"),
        ("--lr", "0.5", "--lr must lie in"),
        ("--joint-vision-blocks", "-1", "--joint-vision-blocks must be 0 or more"),
        ("--audio-variety", "1.2", "--audio-variety must lie in"),
        ("--lone-share", "-0.5", "--lone-share must lie in"),
        ("--mix-weights", "image=1.5", "--mix-weights: expected mix=weight with a whole-number weight"),
        ("--mix-weights", "video=2", "--mix-weights: unknown mixes"),
        ("--mix-weights", "image=0,audio=0", "--mix-weights: mix weights must be whole numbers"),
    ],
)
def test_bad_training_settings_are_refused_before_anything_loads(flag, value, message, monkeypatch, tmp_path):
    from tessera.cli import main

    monkeypatch.setenv("TESSERA_DATA_DIR", str(tmp_path))
    with pytest.raises(SystemExit, match=message):
        main(["models", "train-demo", flag, value])
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_the_joint_stage_trains_the_vision_towers_last_blocks_when_asked_and_never_the_first(depth, stand_in_trainer):
    trainer = stand_in_trainer(depth)
    trained = {id(p) for p in trainer._stage_parameters("joint")}
    blocks = trainer.thinker.visual.blocks
    for n, block in enumerate(blocks):
        wanted = n >= len(blocks) - depth
        assert all((id(p) in trained) == wanted for p in block.parameters()), n
    assert all(id(p) in trained for p in trainer.thinker.visual.merger.parameters())
    assert id(trainer.lora["lora.a"]) in trained
    # the audio tower stays as its stage left it
    assert not any(id(p) in trained for p in trainer.thinker.audio_tower.parameters())


def test_asking_for_more_joint_vision_blocks_than_the_tower_has_is_refused(monkeypatch, tmp_path, stand_in_trainer):
    from demo.training import trainer as training

    tower = stand_in_trainer(0).thinker
    monkeypatch.setattr(training, "load_thinker", lambda checkpoint: (tower, None))
    with pytest.raises(ValueError, match="--joint-vision-blocks 5: the vision tower has 4 blocks"):
        Trainer(tmp_path, tmp_path / "work", TrainConfig(joint_vision_blocks=5), progress=print)
    assert not (tmp_path / "work").exists()
