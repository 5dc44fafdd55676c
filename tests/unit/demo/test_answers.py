"""The answer checker: right words and no wrong ones, hallucinated objects, and yes/no, on hand-written answers."""

import pytest

from demo.answers import check_answer, extract_claims
from demo.golden import GOLDEN_DIR, GoldenItem, audio_facts, image_facts, read_items
from demo.speech import Clip
from demo.world import Scene, Shape

SCENE = Scene(
    width=320,
    height=240,
    background=(250, 250, 250),
    noise_sigma=0.0,
    noise_seed=1,
    shapes=(
        Shape("circle", "red", "large", "left", 58, 120, 26),
        Shape("star", "blue", "small", "top", 160, 43, 13),
    ),
)
MEETING = Clip(kind="meeting", slots={"weekday": "Thursday", "hour": 3}, voice="en-us", speed=160, pitch=50)
COUNT = Clip(kind="count", slots={"count": 12, "noun": "cups"}, voice="en", speed=160, pitch=50)


def image_item(kind: str, mix: str = "image", **extra: str) -> GoldenItem:
    facts = {**image_facts(SCENE), **extra}
    clip = COUNT if mix == "image+audio" else None
    return GoldenItem("t", 0, mix, "image", kind, "?", "", facts, SCENE, clip, ("image", "audio")[: 1 + bool(clip)])


def audio_item(kind: str, clip: Clip) -> GoldenItem:
    return GoldenItem("t", 0, "audio", "audio", kind, "?", "", audio_facts(clip), None, clip, ("audio",))


IMAGE_CASES = [
    # kind, extra facts, answer, correct, hallucinated
    ("colour_of", {"shape": "circle"}, "The circle is red.", True, set()),
    ("colour_of", {"shape": "circle"}, "Red.", True, set()),
    ("colour_of", {"shape": "circle"}, "The colour of the circle is red.", True, set()),
    ("colour_of", {"shape": "circle"}, "The circle's colour is red, on a white background.", True, set()),
    ("colour_of", {"shape": "circle"}, "The circle is blue.", False, set()),
    ("colour_of", {"shape": "circle"}, "It is red or green.", False, set()),
    (
        "colour_of",
        {"shape": "circle"},
        "The image depicts a woman in a white dress with a white hat and a white shirt.",
        False,
        {"woman", "dress", "hat", "shirt"},
    ),
    ("which_shapes", {}, "A red circle and a blue star.", True, set()),
    ("which_shapes", {}, "There is a circle and a star.", True, set()),
    ("which_shapes", {}, "A red circle.", False, set()),
    ("which_shapes", {}, "A red circle, a blue star and a green triangle.", False, {"triangle"}),
    ("which_shapes", {}, "A blue circle and a blue star.", False, set()),
    ("count", {}, "There are two shapes.", True, set()),
    ("count", {}, "2", True, set()),
    ("count", {}, "There are three shapes.", False, set()),
    ("count", {}, "Two.", True, set()),
    ("count", {}, "The one who makes the world go round, two.", True, set()),
    ("exists", {"shape": "circle", "colour": "red", "expected": "yes"}, "The image of a red circle.", False, set()),
    ("exists", {"shape": "square", "colour": "green", "expected": "no"}, "No.", True, set()),
    ("exists", {"shape": "square", "colour": "green", "expected": "no"}, "No, there is no green square.", True, set()),
    (
        "exists",
        {"shape": "square", "colour": "green", "expected": "no"},
        "Yes, there is a green square.",
        False,
        {"square"},
    ),
    ("exists", {"shape": "circle", "colour": "blue", "expected": "no"}, "No, the circle is red.", True, set()),
    ("exists", {"shape": "circle", "colour": "red", "expected": "yes"}, "Yes, there is a red circle.", True, set()),
    ("exists", {"shape": "circle", "colour": "red", "expected": "yes"}, "I can't tell.", False, set()),
    ("where", {"shape": "star"}, "The star is at the top.", True, set()),
    ("where", {"shape": "star"}, "At the top of the image.", True, set()),
    ("where", {"shape": "star"}, "The star is in the top left corner.", False, set()),
    ("where", {"shape": "star"}, "It is in the middle.", False, set()),
    ("describe", {}, "A large red circle on the left and a small blue star at the top.", True, set()),
    ("describe", {}, "On the left is a red circle; the star at the top is blue.", True, set()),
    ("describe", {}, "A red circle on the right and a blue star at the top.", False, set()),
    ("describe", {}, "A red circle and a blue star next to a tree.", False, {"tree"}),
]


@pytest.mark.parametrize(("kind", "extra", "answer", "correct", "hallucinated"), IMAGE_CASES)
def test_image_answers(kind, extra, answer, correct, hallucinated):
    verdict = check_answer(image_item(kind, **extra), answer)
    assert verdict.correct is correct, verdict.problems
    assert set(verdict.hallucinated) == hallucinated


AUDIO_CASES = [
    ("when", MEETING, "The meeting is on Thursday at three o'clock.", True, set()),
    ("when", MEETING, "Thursday, 3 pm.", True, set()),
    ("when", MEETING, "On Thursday at 15:00.", True, set()),
    ("when", MEETING, "On Friday at three.", False, set()),
    ("when", MEETING, "Thursday at four o'clock.", False, set()),
    ("when", MEETING, "I'm sorry, I can't help with that.", False, set()),
    ("transcript", MEETING, "A woman says the meeting is on Thursday at three o'clock.", True, set()),
    ("how_many", COUNT, "There are 12 cups on the table.", True, set()),
    ("how_many", COUNT, "Twelve cups.", True, set()),
    ("how_many", COUNT, "Twelve books.", False, {"book"}),
    ("how_many", COUNT, "Eleven cups.", False, set()),
    ("sound", MEETING, "Someone speaking about a meeting.", True, set()),
    ("sound", MEETING, "A beep.", False, set()),
]


@pytest.mark.parametrize(("kind", "clip", "answer", "correct", "hallucinated"), AUDIO_CASES)
def test_audio_answers(kind, clip, answer, correct, hallucinated):
    verdict = check_answer(audio_item(kind, clip), answer)
    assert verdict.correct is correct, verdict.problems
    assert set(verdict.hallucinated) == hallucinated


@pytest.mark.parametrize(
    ("kind", "slots", "answer", "correct"),
    [
        ("who", {"name": "Mary"}, "Call Mary.", True),
        ("who", {"name": "Mary"}, "Mary or John.", False),
        ("favourite_colour", {"colour": "blue"}, "The speaker's favourite colour is blue.", True),
        ("favourite_colour", {"colour": "blue"}, "Blue.", True),
        ("favourite_colour", {"colour": "blue"}, "Green.", False),
    ],
)
def test_name_and_colour_answers(kind, slots, answer, correct):
    sentence = "call" if "name" in slots else "colour"
    clip = Clip(kind=sentence, slots=slots, voice="en", speed=160, pitch=50)
    assert check_answer(audio_item(kind, clip), answer).correct is correct


@pytest.mark.parametrize(
    ("kind", "answer", "correct"),
    [("beep", "A beep, a pure tone.", True), ("silence", "Nothing, it is silent.", True), ("noise", "Static.", True)],
)
def test_sound_labels(kind, answer, correct):
    clip = Clip(kind=kind, seconds=1.0)
    assert check_answer(audio_item("sound", clip), answer).correct is correct
    assert not check_answer(audio_item("sound", clip), "A man talking.").correct


def test_a_sound_answer_may_leave_the_words_out_but_may_not_misquote_them():
    assert check_answer(audio_item("sound", MEETING), "A voice speaking.").correct
    assert check_answer(audio_item("sound", MEETING), 'A voice saying: "The meeting is on Thursday at three."').correct
    wrong = check_answer(audio_item("sound", MEETING), 'A voice saying: "The meeting is on Monday at three."')
    assert not wrong.correct
    assert wrong.problems == ("the clip does not say Monday",)


def test_white_noise_is_a_sound_not_a_colour():
    claims = extract_claims("White noise, a steady hiss.")
    assert claims.colours == []
    assert claims.sounds == {"noise"}
    assert extract_claims("A white circle.").colours == [("circle", "white")]


def test_speaker_words_are_not_objects_in_audio_but_are_in_images():
    audio = check_answer(audio_item("transcript", MEETING), "A man says the meeting is on Thursday at three.")
    assert audio.correct
    assert not audio.objects
    image = check_answer(image_item("describe"), "A man holding a red circle and a blue star.")
    assert not image.correct
    assert image.hallucinated == {"man"}


def test_an_image_answer_using_the_clip_is_wrong():
    verdict = check_answer(image_item("which_shapes", mix="image+audio"), "Twelve cups on a table.")
    assert not verdict.correct
    assert verdict.hallucinated == {"cup", "table"}


def test_claims_bind_colours_positions_and_counts():
    claims = extract_claims("A large red circle on the left, and the star at the top is blue. Three shapes.")
    assert ("circle", "red") in claims.colours
    assert ("star", "blue") in claims.colours
    assert claims.positions_of("circle") == {"left"}
    assert claims.positions_of("star") == {"top"}
    assert ("shape", 3) in claims.numbers
    assert extract_claims("The one who makes the world go round.").numbers == []
    assert extract_claims("At one o'clock.").numbers == [(None, 1)]
    assert extract_claims("There is one circle. Just one.").numbers == [("circle", 1), (None, 1)]
    assert claims.objects == {"circle", "star"}
    assert extract_claims("There is no red square.").objects == set()
    assert extract_claims("Nope.").yes_no == "no"


def test_every_reference_answer_passes_its_own_check():
    for item in read_items(GOLDEN_DIR / "heldout.jsonl"):
        verdict = check_answer(item, item.answer)
        assert verdict.correct, (item.id, item.answer, verdict.problems)
        assert not verdict.hallucinated
