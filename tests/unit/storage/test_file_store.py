"""Uploaded files on SQLite and PostgreSQL: their tenant's alone, paged newest or oldest first, deleted with their
bytes, and swept past their expiry on a clock the test moves."""

from __future__ import annotations

from datetime import timedelta

import pytest

from serving.errors import InvalidRequest, NotFound
from storage.files import FileStore


@pytest.fixture
def files(db, tmp_path, clock):
    return FileStore(db, tmp_path / "uploads", clock)


def test_a_file_is_its_tenants_alone(files):
    row = files.create("t1", "batch", "in.jsonl", b'{"custom_id": "a"}\n', expires_days=30)
    assert (row.bytes, row.filename, row.purpose) == (19, "in.jsonl", "batch")
    assert files.content("t1", row.id) == b'{"custom_id": "a"}\n'
    for call in (files.get, files.content, files.delete):
        with pytest.raises(NotFound):
            call("t2", row.id)
    with pytest.raises(NotFound):
        files.get("t1", "file-../../etc")


def test_files_page_in_either_order(files, clock):
    made = []
    for n in range(5):
        clock.now += timedelta(seconds=1)
        made.append(files.create("t1", "batch", f"{n}.jsonl", b"x", expires_days=30).id)
    files.create("t2", "batch", "other.jsonl", b"x", expires_days=30)
    newest = files.page("t1", limit=2)
    assert ([r.id for r in newest.data], newest.has_more) == (made[:-3:-1], True)
    rest = files.page("t1", after=made[3], limit=10)
    assert [r.id for r in rest.data] == made[2::-1]
    assert [r.id for r in files.page("t1", order="asc").data] == made
    assert files.page("t1", purpose="fine-tune").data == []
    for bad in ({"limit": 0}, {"order": "sideways"}):
        with pytest.raises(InvalidRequest):
            files.page("t1", **bad)


def test_delete_and_sweep_take_the_bytes_too(files, clock):
    kept = files.create("t1", "batch", "kept.jsonl", b"k", expires_days=30)
    gone = files.create("t1", "batch", "gone.jsonl", b"g", expires_days=30)
    files.delete("t1", gone.id)
    with pytest.raises(NotFound):
        files.content("t1", gone.id)
    short = files.create("t1", "batch", "short.jsonl", b"s", expires_days=1)
    clock.now += timedelta(days=2)
    with pytest.raises(NotFound):
        files.get("t1", short.id)  # expired: gone for the API before the sweep runs
    assert files.sweep() == 1
    assert not list(files.root.rglob(short.id))
    assert files.content("t1", kept.id) == b"k"
