"""A batch's input file read as OpenAI reads it: the requests it may run, or every bad line named."""

from __future__ import annotations

import json

from api.batches.reading import read_lines

CHAT = "/v1/chat/completions"


def _line(custom_id="a", url=CHAT, body=None, **extra) -> str:
    return json.dumps(
        {"custom_id": custom_id, "method": "POST", "url": url, "body": body or {"model": "small"}, **extra}
    )


def test_good_lines_become_requests_numbered_as_in_the_file():
    content = "\n".join([_line("a"), "", _line("b", body={"model": "large", "messages": []})]).encode()
    lines, errors = read_lines(content, CHAT)
    assert errors == []
    assert lines == [(1, "a", {"model": "small"}), (3, "b", {"model": "large", "messages": []})]


def test_every_bad_line_is_named_with_its_code():
    content = "\n".join(
        [
            _line("a"),
            "not json",
            "[1, 2]",
            json.dumps({"method": "POST", "url": CHAT, "body": {}}),
            _line("a"),
            _line("c", url="/v1/responses"),
            _line("d", method="GET"),
            json.dumps({"custom_id": "e", "method": "POST", "url": CHAT, "body": "text"}),
        ]
    ).encode()
    lines, errors = read_lines(content, CHAT)
    assert [(e["line"], e["code"]) for e in errors] == [
        (2, "invalid_json_line"),
        (3, "invalid_json_line"),
        (4, "missing_custom_id"),
        (5, "duplicate_custom_id"),
        (6, "mismatched_url"),
        (7, "invalid_method"),
        (8, "invalid_body"),
    ]
    assert [n for n, _, _ in lines] == [1]


def test_an_empty_or_undecodable_file_fails():
    assert read_lines(b"\n\n", CHAT)[1][0]["code"] == "empty_file"
    assert read_lines(b"\xff\xfe", CHAT)[1][0]["code"] == "invalid_file"
