"""Image claims checked against what a label head detected."""

from __future__ import annotations

import torch

from grounding.image_evidence import check_image_claims, findings_facts, position_of
from serving.encoders.detection import Detection, ImageFindings, LabelHead

RED_CIRCLE_LEFT = Detection("circle:red", cells=3, row=0.5, col=0.2)
BLUE_STAR_TOP = Detection("star:blue", cells=1, row=0.15, col=0.5)
FINDINGS = (ImageFindings(8, 8, (RED_CIRCLE_LEFT, BLUE_STAR_TOP)),)


def test_positions_follow_the_world_layout():
    assert position_of(0.5, 0.5) == "centre"
    assert position_of(0.5, 0.18) == "left"
    assert position_of(0.82, 0.5) == "bottom"
    assert position_of(0.2, 0.6) == "top"


def test_facts_keep_the_colour_covering_more_tokens():
    noisy = (ImageFindings(8, 8, (RED_CIRCLE_LEFT, Detection("circle:orange", 1, 0.5, 0.25))),)
    facts = findings_facts(noisy)
    assert facts["colours"] == {"circle": "red"}
    assert facts["count"] == 1


def test_a_right_answer_is_wholly_supported():
    check = check_image_claims("There are two shapes: a red circle on the left and a blue star at the top.", FINDINGS)
    assert check.claims >= 5
    assert check.unsupported == ()


def test_invented_objects_wrong_colours_and_counts_are_unsupported():
    check = check_image_claims("A woman in a white dress. The circle is green. There are three shapes.", FINDINGS)
    assert "a woman" in check.unsupported
    assert "a dress" in check.unsupported
    assert "the circle is green" in check.unsupported
    assert "3 shapes" in check.unsupported
    assert check.supported >= 1  # the circle itself is there


def test_a_label_head_groups_tokens_by_label():
    labels = ["circle:red", "star:blue"]
    weight = torch.zeros(3, 4)
    weight[1, 0] = weight[2, 1] = 1.0
    weight[0, 2] = 0.5  # "nothing here" wins on tokens with neither feature
    head = LabelHead(weight, torch.zeros(3), labels)
    embeds = torch.zeros(4, 4)  # a 2x2 grid: circle top-left and bottom-left, star bottom-right
    embeds[0, 0] = embeds[2, 0] = embeds[3, 1] = 1.0
    embeds[1, 2] = 1.0
    findings = head.findings(embeds, (1, 4, 4), merge_size=2)
    assert (findings.rows, findings.cols) == (2, 2)
    by_label = {d.label: d for d in findings.detections}
    assert by_label["circle:red"].cells == 2
    assert (by_label["circle:red"].row, by_label["circle:red"].col) == (0.5, 0.25)
    assert (by_label["star:blue"].row, by_label["star:blue"].col) == (0.75, 0.75)


def test_a_request_with_detections_and_no_audio_is_scored_on_its_image_claims():
    from grounding.scorer import GroundingScorer

    scorer = GroundingScorer()
    try:
        result = scorer.score_media("The circle is red. A tree stands behind it.", None, FINDINGS)
        assert result is not None
        assert result.unsupported == ("a tree",)
        assert result.score == (result.claims - 1) / result.claims
        assert scorer.score_media("Yes.", None, FINDINGS) == type(result)(1.0, 0, ())
        assert scorer.score_media("Anything.", None, ()) is None  # no evidence: no score
    finally:
        scorer.close()


def test_a_yes_or_no_is_checked_against_the_detections():
    asked = "Is there a blue star in the image?"
    assert check_image_claims("Yes.", FINDINGS, asked).unsupported == ()
    assert check_image_claims("No.", FINDINGS, asked).unsupported == ("no: is there a blue star",)
    not_there = "Is there a green square in the image?"
    assert check_image_claims("No, there is no green square.", FINDINGS, not_there).unsupported == ()
    assert "yes: is there a green square" in check_image_claims("Yes, there is.", FINDINGS, not_there).unsupported


def test_an_answer_naming_some_of_the_shapes_asked_for_leaves_out_the_rest():
    partial = "There is a red circle on the left."
    for question in ("Which shapes are in this image?", "Describe the image."):
        assert check_image_claims(partial, FINDINGS, question).unsupported == ("leaves out the star",)
        assert check_image_claims("A red circle and a blue star.", FINDINGS, question).unsupported == ()
    # asked about one shape, naming only that one leaves nothing out
    assert check_image_claims(partial, FINDINGS, "What colour is the circle?").unsupported == ()


def test_every_colour_named_for_an_asked_shape_is_said_of_that_shape():
    question = "Which colour is the circle in the picture?"
    many = check_image_claims("The circle is red, blue and green.", FINDINGS, question)
    assert set(many.unsupported) == {"the circle is blue", "the circle is green"}
    assert check_image_claims("The circle is red.", FINDINGS, question).unsupported == ()
    # asked about something else, a loose colour is any shape's: the star is blue
    assert check_image_claims("The circle is red, and blue.", FINDINGS, "Where is the circle?").unsupported == ()


def test_a_label_head_reports_how_sure_it_is():
    labels = ["square:blue", "square:yellow", "star:red"]
    head = LabelHead(torch.eye(4), torch.zeros(4), labels)
    # four tokens as log-probabilities: a square split between blue and yellow, a star seen nowhere but glimpsed
    probs = torch.tensor(
        [
            [0.1, 0.5, 0.4, 0.0],  # square, blue ahead
            [0.1, 0.4, 0.5, 0.0],  # square, yellow ahead
            [0.7, 0.0, 0.0, 0.3],  # nothing here, though a star gets 0.3
            [1.0, 0.0, 0.0, 0.0],
        ]
    )
    findings = head.findings(torch.log(probs.clamp_min(1e-30)), (1, 4, 4), merge_size=2)
    shares = {d.label: d.share for d in findings.detections}
    assert shares == {"square:blue": 0.5, "square:yellow": 0.5}  # each holds half the square's probability
    assert findings.peaks == {"square": 0.9, "star": 0.3}


def _unsure_findings(*detections, peaks=None):
    return (ImageFindings(8, 8, tuple(detections), peaks or {}),)


def test_a_colour_the_head_splits_supports_no_claim_of_it():
    split = _unsure_findings(
        Detection("square:blue", 1, 0.5, 0.9, share=0.49), Detection("square:yellow", 1, 0.2, 0.5, share=0.47)
    )
    asked = "What colour is the square?"
    assert check_image_claims("The square is blue.", split, asked).unsupported == ("the square is blue",)
    assert check_image_claims("The square is yellow.", split, asked).unsupported == ("the square is yellow",)
    # the shape itself is there; a colour neither token showed is still a plain "no"
    assert check_image_claims("There is a square.", split).unsupported == ()
    assert check_image_claims("No.", split, "Is there a red square?").unsupported == ()
    assert check_image_claims("No.", split, "Is there a yellow square?").unsupported == (
        "no: is there a yellow square",
    )
    assert check_image_claims("Yes.", split, "Is there a blue square?").unsupported == ("yes: is there a blue square",)
    sure = _unsure_findings(Detection("square:blue", 2, 0.5, 0.9, share=0.8))
    assert check_image_claims("The square is blue.", sure, asked).unsupported == ()


def test_a_glimpsed_shape_may_be_there():
    findings = _unsure_findings(RED_CIRCLE_LEFT, peaks={"circle": 0.99, "square": 0.21, "star": 0.05})
    assert check_image_claims("A red circle.", findings, "Which shapes are in this image?").unsupported == (
        "may leave out the square",
    )
    assert check_image_claims("A red circle and a square.", findings, "Which shapes are there?").unsupported == (
        "a square",  # glimpsed is not seen: naming it is not supported either
    )
    assert check_image_claims("There is one shape.", findings, "How many shapes are there?").unsupported == (
        "1 shape (a square may be there too)",
    )
    assert check_image_claims("No.", findings, "Is there an orange square?").unsupported == (
        "no: is there an orange square",
    )
    assert check_image_claims("No.", findings, "Is there an orange star?").unsupported == ()  # 0.05 is not a glimpse
    faint = _unsure_findings(RED_CIRCLE_LEFT, peaks={"circle": 0.99, "square": 0.19})
    assert check_image_claims("There is one shape.", faint, "How many shapes are there?").unsupported == ()
