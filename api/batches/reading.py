"""A batch's input file read as OpenAI reads it: one JSON request per line, each with a `custom_id` unique in the
file, `method` POST and the batch's `url`. Any line that is not so fails the whole batch, every bad line named in
`errors.data` (`line`, `code`, `message`). A line whose request body the endpoint will refuse is not an error here:
it runs, and its 400 lands in the error file."""

from __future__ import annotations

import json
from typing import Any

MAX_LINES = 50_000

Line = tuple[int, str, dict[str, Any]]  # (1-based line number, custom_id, request body)


def _error(line: int, code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message, "param": None, "line": line}


def _problem(raw: str, endpoint: str, seen: set[str]) -> tuple[str, str] | dict[str, Any]:
    """The line's request, or (code, message) saying what is wrong with it."""
    try:
        request = json.loads(raw)
    except ValueError as exc:
        return "invalid_json_line", f"the line is not JSON: {exc}"
    if not isinstance(request, dict):
        return "invalid_json_line", "the line is not a JSON object"
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return "missing_custom_id", "the line has no `custom_id`"
    if custom_id in seen:
        return "duplicate_custom_id", f"`custom_id` {custom_id!r} appears more than once"
    seen.add(custom_id)
    if request.get("method", "POST") != "POST":
        return "invalid_method", "`method` must be POST"
    if request.get("url") != endpoint:
        return "mismatched_url", f"`url` must be the batch's endpoint, {endpoint}"
    if not isinstance(request.get("body"), dict):
        return "invalid_body", "`body` must be a JSON object"
    return request


def read_lines(content: bytes, endpoint: str) -> tuple[list[Line], list[dict[str, Any]]]:
    """The file's requests, and the errors that fail the batch (none when it may run)."""
    lines: list[Line] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return [], [_error(1, "invalid_file", "the file is not UTF-8 text")]
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        if len(lines) + len(errors) >= MAX_LINES:
            errors.append(_error(number, "too_many_lines", f"a batch holds at most {MAX_LINES} requests"))
            break
        found = _problem(raw, endpoint, seen)
        if isinstance(found, dict):
            lines.append((number, found["custom_id"], found["body"]))
        else:
            errors.append(_error(number, *found))
    if not lines and not errors:
        errors.append(_error(1, "empty_file", "the file holds no requests"))
    return lines, errors
