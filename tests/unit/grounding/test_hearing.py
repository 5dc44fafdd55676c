"""The trained audio tower's own reading of a clip: CTC over the world's words, as grounding evidence."""

import json

import numpy as np
import pytest
import torch

from demo.checkpoints import build_demo_checkpoints
from demo.speech import Clip, render_clip
from demo.training.stage_losses import ctc_vocabulary
from grounding.audio_evidence import audio_claim_verdicts
from grounding.hearing import AUDIO_WORDS_FILE, AudioWordReader, read_words, sentence
from grounding.models import TRANSCRIPT_HINT_FILE, checkpoint_hint
from grounding.scorer import GroundingScorer
from serving.encoders.detection import BIG_SHAPE_CELLS_KEY, LABEL_HEAD_FILE, LabelHead
from tests.conftest import MODELS_DIR


def test_greedy_reading_merges_repeats_and_drops_blanks():
    vocabulary = ["please", "call", "emma"]
    path = [0, 1, 1, 0, 2, 2, 2, 0, 0, 3, 0, 3]  # a word said twice needs a blank between
    log_odds = torch.nn.functional.one_hot(torch.tensor(path), 4).float()
    assert read_words(log_odds, vocabulary) == ["please", "call", "emma", "emma"]
    assert read_words(torch.zeros(0, 4), vocabulary) == []


def test_a_reading_is_written_as_a_sentence():
    assert sentence(["please", "call", "emma"]) == "Please call Emma."
    assert sentence(["the", "meeting", "is", "on", "friday"]) == "The meeting is on Friday."
    assert sentence([]) == ""


def test_a_checkpoint_without_a_word_list_has_no_reader_and_a_broken_one_is_refused(tmp_path):
    assert AudioWordReader.find(tmp_path) is None
    (tmp_path / AUDIO_WORDS_FILE).parent.mkdir()
    (tmp_path / AUDIO_WORDS_FILE).write_text(json.dumps({"words": []}))
    with pytest.raises(ValueError, match="no word list"):
        AudioWordReader.find(tmp_path)


@pytest.fixture(scope="module")
def large_reader():
    path = build_demo_checkpoints(MODELS_DIR, ["large"], progress=lambda _: None)["large"]
    reader = AudioWordReader.find(path)
    assert reader is not None, "the trained large checkpoint carries its audio tower's word list"
    assert reader.words == list(ctc_vocabulary())
    return reader


CLIPS = [
    Clip("call", {"name": "Olivia"}, voice="en-us", speed=145, pitch=50),
    Clip("meeting", {"weekday": "Thursday", "hour": 3}, voice="en", speed=160, pitch=50),
    Clip("count", {"count": 7, "noun": "apples"}, voice="en-us", speed=130, pitch=35),
]


@pytest.mark.parametrize("clip", CLIPS, ids=lambda c: c.kind)
def test_the_trained_tower_reads_world_clips_word_for_word(large_reader, clip):
    assert large_reader.read(render_clip(clip)) == clip.text


def test_the_tower_hears_no_words_in_silence_and_none_in_no_samples(large_reader):
    # The tower learns to name a clip without speech by its sound label ("silence" is a CTC class of its own); in a
    # silent second it may say that label or nothing, but never a spoken word.
    assert large_reader.read(np.zeros(16_000, dtype=np.float32)) in ("", "Silence.")
    assert large_reader.read(np.zeros(0, dtype=np.float32)) == ""


def test_the_scorer_checks_spoken_facts_against_the_towers_reading_too(large_reader):
    clip = CLIPS[2]
    samples = render_clip(clip)
    with_tower = GroundingScorer(audio_reader=large_reader)
    try:
        heard = with_tower.hypotheses(samples)
        assert heard.reading == clip.text  # beside Whisper's best few
        right = audio_claim_verdicts("There are seven apples on the table.", heard, "speech")
        wrong = audio_claim_verdicts("There are nine cups on the table.", heard, "speech")
        assert all(ok for _, ok, _ in right)
        assert {text for text, ok, _ in wrong if not ok} == {"the number 9", "a cup"}
    finally:
        with_tower.close()


def test_the_transcript_hint_comes_from_the_first_checkpoint_that_carries_one(tmp_path):
    bare, hinted = tmp_path / "bare", tmp_path / "hinted"
    (hinted / TRANSCRIPT_HINT_FILE).parent.mkdir(parents=True)
    (hinted / TRANSCRIPT_HINT_FILE).write_text("Olivia, Emma.\n  Thursday.\n")
    bare.mkdir()
    assert checkpoint_hint([bare, hinted]) == "Olivia, Emma. Thursday."
    assert checkpoint_hint([bare]) == ""


def test_the_demo_checkpoint_carries_what_grounding_reads_beside_it(large_reader):
    from safetensors import safe_open

    from demo.speech import NAMES, WEEKDAYS
    from demo.world import WORLD_SHAPE_CELLS

    checkpoint = large_reader.checkpoint
    hint = checkpoint_hint([checkpoint])
    assert all(word in hint for word in (*NAMES, *WEEKDAYS))
    with safe_open(str(checkpoint / LABEL_HEAD_FILE), framework="pt") as f:
        assert (f.metadata() or {})[BIG_SHAPE_CELLS_KEY] == str(WORLD_SHAPE_CELLS)
    head = LabelHead.load(checkpoint)
    assert head is not None
    assert head.big_shape_cells == WORLD_SHAPE_CELLS
