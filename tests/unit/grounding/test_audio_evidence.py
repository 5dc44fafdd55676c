"""Audio evidence: the sound label from the samples, and answers' facts checked against a transcript."""

from __future__ import annotations

import numpy as np
import pytest

from demo.speech import SOUNDS, render_clip, sample_clip
from grounding.audio_evidence import Heard, audio_claim_verdicts, heard_of, sound_label, transcripts


@pytest.mark.parametrize("kind", [*SOUNDS, None])
def test_the_label_names_each_kind_of_world_clip(kind):
    rng = np.random.default_rng(11)
    for _ in range(6):
        clip = sample_clip(rng, kind=kind, speech_share=1.0)
        assert sound_label(render_clip(clip)) == ("speech" if clip.is_speech else clip.kind)


def test_empty_samples_are_silence():
    assert sound_label(np.zeros(0, dtype=np.float32)) == "silence"


TRANSCRIPT = "The meeting is on Thursday at 3 o'clock."


def _unsupported(answer: str, transcript: str | Heard = TRANSCRIPT, label: str = "speech") -> list[str]:
    return [text for text, ok, _ in audio_claim_verdicts(answer, transcript, label) if not ok]


def test_right_facts_are_supported_and_a_wrong_day_is_not():
    assert _unsupported("The meeting is on Thursday at three o'clock.") == []
    assert _unsupported("The meeting is on Friday at three o'clock.") == ["on Friday"]
    assert _unsupported("The meeting is on Thursday at four o'clock.") == ["the number 4"]


def test_names_counts_things_and_colours_must_be_heard():
    assert _unsupported("You should call Emma.", "Please call Emma.") == []
    assert _unsupported("You should call Sarah.", "Please call Emma.") == ["the name Sarah"]
    said = "There are seventeen cats on the table."
    assert _unsupported("There are seventeen cats on the table.", said) == []
    assert sorted(_unsupported("There are six dogs on the table.", said)) == ["a dog", "the number 6"]
    assert _unsupported("The speaker's favourite colour is blue.", "My favourite colour is red.") == ["the colour blue"]


def test_the_kind_of_sound_must_match_the_label():
    assert _unsupported("A beep: a pure tone.", "", "beep") == []
    assert _unsupported("White noise, a steady hiss.", "", "noise") == []  # "white" names the noise, not a colour
    assert _unsupported("The speaker says hello.", "Hello.") == []  # the speaker is the clip's voice
    assert sorted(_unsupported("The speaker says nothing.", "", "silence")) == ["a speaker", "the sound is speech"]
    assert _unsupported("I hear a voice saying hello.", "", "noise") == ["the sound is speech"]
    assert _unsupported("Please call Emma, the speaker says.", "", "silence") == [
        "the name Emma",
        "the sound is speech",
        "a speaker",
    ]


def test_one_transcript_or_several_are_read_as_a_tuple_of_at_least_one():
    assert transcripts("Please call Emma.") == ("Please call Emma.",)
    assert transcripts(["Please call Emma.", "Please call Anna."]) == ("Please call Emma.", "Please call Anna.")
    assert transcripts([]) == ("",)
    assert transcripts("") == ("",)


def test_the_second_listener_supports_what_whispers_best_does_not_contradict():
    # Whisper's best misheard the thing and the hour as non-words; the tower's reading fills them in
    heard = Heard(("There are free cares on the table.",), "There are three chairs on the table.")
    assert _unsupported("There are three chairs on the table.", heard) == []
    # Whisper's best heard another day: the tower that answered may share its reader's mishearing
    meeting = Heard(
        ("The meeting is on Wednesday at 11 o'clock.", "The meeting is on Wednesday at eleven o'clock."),
        "The meeting is on Tuesday at eleven o'clock.",
    )
    assert _unsupported("The meeting is on Tuesday at eleven o'clock.", meeting) == ["on Tuesday"]
    assert _unsupported("The meeting is on Wednesday at eleven o'clock.", meeting) == []
    # a runner-up that says the value still supports it, whatever the best says
    runner_up = Heard(("Please call Anna.", "Please call Emma."), "Please call Emma.")
    assert _unsupported("You should call Emma.", runner_up) == []
    assert heard_of("Please call Emma.") == Heard(("Please call Emma.",))
    assert heard_of(meeting) is meeting
