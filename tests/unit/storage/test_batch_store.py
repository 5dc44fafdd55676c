"""Batches on SQLite and PostgreSQL: the object OpenAI's SDK reads, status moves that stamp their moment and never
undo an end, lines recorded once and finished once, and pages newest first."""

from __future__ import annotations

from datetime import timedelta

import pytest

from serving.errors import InvalidRequest, NotFound
from storage.batches import BatchStore


@pytest.fixture
def batches(db, clock):
    return BatchStore(db, clock)


def _create(batches, tenant="t1"):
    return batches.create(
        tenant_id=tenant,
        key_id="k1",
        endpoint="/v1/chat/completions",
        input_file_id="file-1",
        completion_window="24h",
        metadata={"job": "nightly"},
    )


def test_a_batch_object_as_openai_shapes_it(batches):
    body = _create(batches)
    assert (body["object"], body["status"], body["metadata"]) == ("batch", "validating", {"job": "nightly"})
    assert body["expires_at"] - body["created_at"] == 24 * 3600
    assert body["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
    assert batches.get("t1", body["id"]).body == body
    with pytest.raises(NotFound):
        batches.get("t2", body["id"])
    with pytest.raises(InvalidRequest):
        batches.create(
            tenant_id="t1", key_id="k", endpoint="x", input_file_id="f", completion_window="7d", metadata=None
        )


def test_moves_stamp_their_moment_and_an_ended_batch_stays_ended(batches, clock):
    body = _create(batches)
    clock.now += timedelta(seconds=5)
    moved = batches.move(body["id"], "in_progress", request_counts={"total": 2, "completed": 0, "failed": 0})
    assert moved["in_progress_at"] == body["created_at"] + 5
    assert batches.move(body["id"], "in_progress", only_from="validating")["status"] == "in_progress"
    assert batches.move(body["id"], "completed")["completed_at"] is not None
    assert batches.move(body["id"], "cancelling")["status"] == "completed"


def test_lines_are_recorded_once_and_finished_once(batches):
    body = _create(batches)
    lines = [(1, "a", {"model": "small"}), (2, "b", {"model": "small"})]
    batches.add_lines(body["id"], lines)
    batches.add_lines(body["id"], lines)  # picked up again: nothing doubled
    assert [line.custom_id for line in batches.pending(body["id"])] == ["a", "b"]
    batches.finish_line(body["id"], 1, ok=True, result={"custom_id": "a", "n": 1})
    batches.finish_line(body["id"], 1, ok=False, result={"custom_id": "a", "n": 2})  # the first result stands
    assert [line.custom_id for line in batches.pending(body["id"])] == ["b"]
    assert batches.lines(body["id"])[0].result == {"custom_id": "a", "n": 1}
    assert batches.counts(body["id"]) == {"total": 2, "completed": 1, "failed": 0}


def test_pages_run_newest_first(batches, clock):
    made = []
    for _ in range(3):
        clock.now += timedelta(seconds=1)
        made.append(_create(batches)["id"])
    _create(batches, tenant="t2")
    first, more = batches.page("t1", limit=2)
    assert ([b["id"] for b in first], more) == (made[:0:-1], True)
    rest, more = batches.page("t1", after=made[1])
    assert ([b["id"] for b in rest], more) == ([made[0]], False)
