"""A transcript in each response format, from timed segments."""

from __future__ import annotations

from api.audio.formats import render, srt, usage, vtt
from serving.speech import Segment

SEGMENTS = [Segment(0, 0.0, 2.5, " Hello there.", [1, 2]), Segment(1, 2.5, 3661.25, " Goodbye.", [3], -0.25)]


def test_subtitles_number_and_time_each_segment():
    assert srt(SEGMENTS) == (
        "1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n2\n00:00:02,500 --> 01:01:01,250\nGoodbye.\n"
    )
    assert vtt(SEGMENTS) == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello there.\n\n00:00:02.500 --> 01:01:01.250\nGoodbye.\n"
    )


def test_each_format_has_its_body_and_media_type():
    args = {"task": "transcribe", "language": None, "duration": 3.2, "text": "Hello there. Goodbye.", "temperature": 0}
    body, media = render("json", segments=[], **args)
    assert body == {"text": "Hello there. Goodbye.", "usage": {"type": "duration", "seconds": 4}}
    assert media == "application/json"
    assert render("text", segments=[], **args) == ("Hello there. Goodbye.", "text/plain; charset=utf-8")
    assert render("srt", segments=SEGMENTS, **args)[1].startswith("application/x-subrip")
    assert render("vtt", segments=SEGMENTS, **args)[0].startswith("WEBVTT\n\n")
    verbose, _ = render("verbose_json", segments=SEGMENTS, **args)
    assert isinstance(verbose, dict)
    assert (verbose["task"], verbose["language"], verbose["duration"]) == ("transcribe", "english", 3.2)
    first, second = verbose["segments"]
    assert (first["id"], first["start"], first["end"], first["tokens"]) == (0, 0.0, 2.5, [1, 2])
    assert second["avg_logprob"] == -0.25
    assert second["seek"] == 250
    assert usage(0.01) == {"type": "duration", "seconds": 1}
