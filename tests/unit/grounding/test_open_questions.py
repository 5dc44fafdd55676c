"""Open questions for the judge: which claims are asked openly, and the claimed value's probability in an answer."""

import math

import pytest

from grounding.checkable import CheckableClaim, checkable_claims
from grounding.judge import questions_for
from grounding.open_questions import OpenQuestion, open_questions, place_words, value_support
from serving.engines.base import TokenLogprob


def _claim(answer: str) -> CheckableClaim:
    # the answer's first claim about a thing ("2" is a number claim of its own as well)
    return next(c for c in checkable_claims(answer) if c.kind in ("object", "attribute"))


@pytest.mark.parametrize(
    ("answer", "asked"),
    [
        ("There are three shapes.", [("How many shapes are there in the image?", ("three",))]),
        ("There is one shape.", [("How many shapes are there in the image?", ("one",))]),
        ("There are 2 red circles.", [("How many red circles are there in the image?", ("two",))]),
        ("The triangle is blue.", [("What colour is the triangle in the image?", ("blue",))]),
        ("The star is in the middle.", [("Where is the star in the image?", ("centre",))]),
        (
            "A large grey square at the top left.",
            [
                ("What colour is the large square in the image?", ("grey",)),
                ("Where is the large grey square in the image?", ("top", "left")),
            ],
        ),
    ],
)
def test_counts_colours_and_places_in_an_image_are_asked_openly(answer, asked):
    assert [(q.text, q.claimed) for q in open_questions(_claim(answer), "image")] == asked


@pytest.mark.parametrize(
    "answer", ["A giraffe by the window.", "No, there is no green square.", "The background is light.", "A circle."]
)
def test_other_claims_keep_their_yes_no_question(answer):
    claim = _claim(answer)
    assert open_questions(claim, "image") == []
    assert [o for _, o in questions_for(claim, "image", whole=False)] == [None]


def test_a_colour_or_place_also_asks_whether_the_thing_is_there():
    asked = questions_for(_claim("A red square at the top left."), "image", whole=False)
    assert [q for q, _ in asked] == [
        "Is there a square in the image? Answer yes or no.",
        "What colour is the square in the image?",
        "Where is the red square in the image?",
    ]
    (there, _), (colour, _) = questions_for(_claim("The triangle is blue."), "image", whole=False)
    assert (there, colour) == (
        "Is there a triangle in the image? Answer yes or no.",
        "What colour is the triangle in the image?",
    )


@pytest.mark.parametrize(
    ("answer", "asked"),
    [
        (
            "The meeting is on Saturday at twelve o'clock.",
            [
                ("What time does the speaker mention?", "hour", ("twelve",)),
                ("What day does the speaker mention?", "day", ("saturday",)),
            ],
        ),
        ("The meeting is at 5:30.", [("What time does the speaker mention?", "hour", ("five",))]),
        (
            "There are seventeen cups on the table.",
            [("How many cups does the speaker mention?", "count", ("seventeen",))],
        ),
        (
            "The speaker's favourite colour is yellow.",
            [("What colour does the speaker mention?", "colour", ("yellow",))],
        ),
        ('The speaker says: "Please call Linda."', []),  # a name has no list of values to read among
        ("The meeting is on March 3rd.", []),
        ("There is no dog.", []),
    ],
)
def test_days_hours_counts_and_colours_heard_are_asked_openly_and_alone(answer, asked):
    claims = [c for c in checkable_claims(answer) if "audio" in c.media()]
    got = [(q.text, q.slot, q.claimed) for c in claims for q in open_questions(c, "audio")]
    assert got == asked
    for claim in claims:
        questions = questions_for(claim, "audio", whole=False)
        if claim.count is not None:  # a count heard: whether the things are mentioned at all, and how many
            assert [q for q, _ in questions] == [
                "Is there a cup in the audio clip? Answer yes or no.",
                "How many cups does the speaker mention?",
            ]
        elif open_questions(claim, "audio"):  # the open question alone: no yes/no about the clip beside it
            assert [o for _, o in questions] == open_questions(claim, "audio")
        else:
            assert [o for _, o in questions] == [None]


def test_the_day_and_the_hour_heard_are_read_where_the_answer_names_them():
    day = [
        _token("The"),
        _token(" meeting"),
        _token(" is"),
        _token(" on"),
        _token(" Saturday", Saturday=0.7, Friday=0.2, the=0.1),
    ]
    assert value_support(day, OpenQuestion("", "day", ("saturday",))) == pytest.approx(0.7 / 0.9)
    assert value_support(day, OpenQuestion("", "day", ("friday",))) == pytest.approx(0.2 / 0.9)
    hour = [*day, _token(" at"), _token(" five", five=0.9, four=0.1), _token(" o"), _token("'clock")]
    assert value_support(hour, OpenQuestion("", "hour", ("four",))) == pytest.approx(0.1)
    assert value_support(day[:3], OpenQuestion("", "day", ("saturday",))) is None  # it named no day


def _token(token: str, **top: float) -> TokenLogprob:
    """A generated token and its alternatives, spelt as the token is (" three" among " four" and " the")."""
    space = token[: len(token) - len(token.lstrip())]
    alternatives = tuple((space + t, math.log(p)) for t, p in top.items())
    return TokenLogprob(token, math.log(top.get(token.strip(), 1.0)), alternatives)


def test_the_claimed_count_is_read_where_the_answer_names_a_number():
    tokens = [_token("There"), _token(" are"), _token(" three", three=0.6, four=0.3, the=0.1), _token(" shapes")]
    asked = OpenQuestion("How many shapes are there in the image?", "count", ("three",))
    assert value_support(tokens, asked) == pytest.approx(0.6 / 0.9)  # against the other numbers only
    wrong = OpenQuestion("How many shapes are there in the image?", "count", ("two",))
    assert value_support(tokens, wrong) == 0.0
    digits = [_token("3", **{"3": 0.5, "three": 0.25, "4": 0.25})]
    assert value_support(digits, asked) == pytest.approx(0.75)  # "3" and "three" are one value
    assert value_support([_token("Shapes")], asked) is None  # names no number: no judgement


def test_a_place_of_two_words_multiplies_their_probabilities():
    tokens = [_token("It"), _token(" is"), _token(" top", top=0.8, bottom=0.2), _token(" right", right=0.7, left=0.3)]
    assert value_support(tokens, OpenQuestion("", "place", ("top", "right"))) == pytest.approx(0.56)
    assert value_support(tokens, OpenQuestion("", "place", ("top", "left"))) == pytest.approx(0.24)
    assert value_support(tokens, OpenQuestion("", "place", ("bottom",))) == pytest.approx(0.2)
    assert place_words("in the upper middle") == ("top", "centre")


def test_a_colour_is_read_among_colours_with_its_other_spellings():
    tokens = [_token("The"), _token(" triangle"), _token(" is"), _token(" gray", gray=0.5, grey=0.2, blue=0.2, a=0.1)]
    assert value_support(tokens, OpenQuestion("", "colour", ("grey",))) == pytest.approx(0.7 / 0.9)
    assert value_support(tokens, OpenQuestion("", "colour", ("blue",))) == pytest.approx(0.2 / 0.9)


@pytest.mark.parametrize(
    ("answer", "media"),
    [
        ("A small yellow star in the centre.", ("image",)),  # told by its looks and its place in the frame
        ("A red apple.", ("image",)),
        ("There are two shapes.", ("image",)),  # a drawn form
        ("There are five chairs on the table.", ("image", "audio")),  # may be heard of
        ("A dog by the window.", ("image", "audio")),
    ],
)
def test_a_thing_told_by_its_looks_or_place_in_the_frame_is_seen(answer, media):
    assert _claim(answer).media() == media
