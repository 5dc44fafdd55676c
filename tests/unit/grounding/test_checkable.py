"""The generic claim reader: a table of answers in words on no list, and the claims and questions they give."""

import pytest

from grounding.checkable import CheckableClaim, checkable_claims
from grounding.claims import article


def _objects(answer: str) -> list[tuple[str, tuple[str, ...], str | None, int | None]]:
    return [
        (c.subject, c.attributes, c.position, c.count)
        for c in checkable_claims(answer)
        if c.kind == "object" and not c.negated
    ]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("There is a giraffe by the window.", [("giraffe", (), "by the window", None), ("window", (), None, None)]),
        ("The star is on the left.", [("star", (), "on the left", None)]),
        ("I see two red circles on the left.", [("circle", ("red",), "on the left", 2)]),
        (
            "A large blue star sits in the top right corner.",
            [("star", ("large", "blue"), "in the top right corner", None)],
        ),
        ("The image shows a cat next to a lamp.", [("cat", (), "next to a lamp", None), ("lamp", (), None, None)]),
        ("There are 3 yellow triangles.", [("triangle", ("yellow",), None, 3)]),
        ("There is no star in the image.", []),
        ("I don't see a giraffe.", []),
        (
            "It shows a red square, a green circle and a blue star.",
            [("square", ("red",), None, None), ("circle", ("green",), None, None), ("star", ("blue",), None, None)],
        ),
        (
            "A woman in a dress stands under a tree.",
            [("woman", (), "in a dress", None), ("dress", (), None, None), ("tree", (), None, None)],
        ),
        ("There is one circle in the image.", [("circle", (), None, 1)]),
        ("The answer is yes.", []),
    ],
)
def test_objects_with_their_attributes_places_and_counts(answer, expected):
    assert _objects(answer) == expected


@pytest.mark.parametrize(
    ("answer", "subject", "attributes"),
    [
        ("The background is light grey.", "background", ("light", "grey")),
        ("The circles are red.", "circles", ("red",)),
        ("Its colour is purple.", "colour", ("purple",)),
        ("The speaker's favourite colour is purple.", "speaker's favourite colour", ("purple",)),
        ("The big square in the middle is green.", "big square", ("green",)),
        ("The speaker's name is Alice.", "speaker's name", ("Alice",)),
    ],
)
def test_a_subject_and_its_adjectives(answer, subject, attributes):
    claims = [c for c in checkable_claims(answer) if c.kind == "attribute"]
    assert [(c.subject, c.attributes) for c in claims] == [(subject, attributes)]


def test_an_attribute_claim_replaces_the_bare_subject_it_states_more_about():
    claims = checkable_claims("The speaker's favourite colour is purple.")
    assert [(c.kind, c.question("audio")) for c in claims] == [
        ("attribute", "In the audio clip, is the speaker's favourite colour purple?")
    ]
    assert claims[0].media() == ("audio",)
    quoted = checkable_claims('The speaker says: "My favourite colour is black."')
    assert [c.question("audio") for c in quoted] == ["In the audio clip, is the speaker's favourite colour black?"]
    placed = checkable_claims("The big square in the middle is green.")
    assert [c.question("image") for c in placed] == ["In the image, is the big square in the middle green?"]


def test_a_negated_attribute_asserts_nothing():
    assert [c for c in checkable_claims("The background is not white.") if c.kind == "attribute"] == []


@pytest.mark.parametrize(
    ("answer", "kind", "subject"),
    [
        ("The meeting is on Thursday.", "date", "Thursday"),
        ("She says it is due on March 3rd.", "date", "March 3rd"),
        ("They meet at 3 pm.", "time", "3 pm"),
        ("The train leaves at 10:30.", "time", "10:30"),
        ("The speaker asks you to call Sarah.", "name", "Sarah"),
        ("His name is Tobias.", "name", "Tobias"),
        ("The code is 4471.", "number", "4471"),
    ],
)
def test_spoken_facts(answer, kind, subject):
    assert (kind, subject) in [(c.kind, c.subject) for c in checkable_claims(answer)]


def test_a_count_is_not_also_a_bare_number():
    kinds = [(c.kind, c.count, c.subject) for c in checkable_claims("There are 3 circles.")]
    assert kinds == [("object", 3, "circle")]


@pytest.mark.parametrize(
    ("claim", "medium", "question"),
    [
        (
            CheckableClaim("object", "", "giraffe", (), "by the window"),
            "image",
            "Is there a giraffe by the window in the image?",
        ),
        (CheckableClaim("object", "", "square", ("red",)), "image", "Is there a red square in the image?"),
        (CheckableClaim("object", "", "circle", ("orange",)), "image", "Is there an orange circle in the image?"),
        (
            CheckableClaim("object", "", "circle", ("red",), None, 3),
            "image",
            "Are there three red circles in the image?",
        ),
        (CheckableClaim("attribute", "", "background", ("light",)), "image", "In the image, is the background light?"),
        (CheckableClaim("date", "", "Thursday"), "audio", "Does the speaker mention Thursday?"),
        (CheckableClaim("name", "", "Sarah"), "audio", "Does the speaker say the name Sarah?"),
    ],
)
def test_verification_questions(claim, medium, question):
    assert claim.question(medium) == question


def test_which_media_speak_to_a_claim():
    assert CheckableClaim("object", "", "dog").media() == ("image", "audio")
    assert CheckableClaim("attribute", "", "background", ("light",)).media() == ("image",)
    assert CheckableClaim("time", "", "3 pm").media() == ("audio",)


@pytest.mark.parametrize(
    ("answer", "absent"),
    [
        ("No, there is no green square.", ("square", ("green",))),
        ("There isn't a red star in the image.", ("star", ("red",))),
        ("There is a circle but no blue triangle.", ("triangle", ("blue",))),
    ],
)
def test_a_thing_said_to_be_absent_is_a_negated_claim_asked_as_whether_it_is_there(answer, absent):
    negated = [c for c in checkable_claims(answer) if c.negated]
    assert [(c.subject, c.attributes) for c in negated] == [absent]
    subject, attributes = absent
    assert negated[0].question("image") == f"Is there {article(' '.join((*attributes, subject)))} " + (
        f"{' '.join((*attributes, subject))} in the image?"
    )
