"""Stored responses on SQLite and PostgreSQL: kept per tenant, chained oldest first, paged, deleted with the media
no other response uses, and swept past their retention on a clock the test moves."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest

from serving.errors import InvalidRequest, NotFound
from storage.blobs import BlobMissing, BlobStore
from storage.responses import MAX_CHAIN, ResponseStore

PNG = b"\x89PNG fake image bytes"
WAV = b"RIFF fake audio bytes"
SHA_PNG, SHA_WAV = hashlib.sha256(PNG).hexdigest(), hashlib.sha256(WAV).hexdigest()


@pytest.fixture
def store(db, tmp_path, clock):
    return ResponseStore(db, BlobStore(tmp_path / "files"), clock)


def _items(*media: str) -> list[dict]:
    content = [{"type": "input_text", "text": "What is this?"}]
    content += [
        {"type": "input_image", "image_url": None, "media": {"sha256": sha, "mime": "image/png"}} for sha in media
    ]
    return [{"id": "msg_1", "type": "message", "role": "user", "content": content}]


def _save(store, response_id, *, tenant="t1", previous=None, media=None, retention=30, items=None):
    media = media or {}
    store.save(
        tenant_id=tenant,
        body={"id": response_id, "model": "small", "status": "completed", "output": []},
        input_items=items if items is not None else _items(*media),
        media=media,
        request_id=f"chatcmpl-{response_id}",
        retention_days=retention,
        previous_response_id=previous,
    )


def test_a_stored_response_is_its_tenants_alone(store):
    _save(store, "resp_a", media={SHA_PNG: PNG})
    row = store.get("t1", "resp_a")
    assert (row.body["id"], row.request_id, row.model) == ("resp_a", "chatcmpl-resp_a", "small")
    assert store.blobs.get(SHA_PNG) == PNG
    with pytest.raises(NotFound):
        store.get("t2", "resp_a")
    with pytest.raises(NotFound):
        store.get("t1", "resp_missing")


def test_a_chain_reads_oldest_first_and_names_a_gap(store):
    _save(store, "resp_1")
    _save(store, "resp_2", previous="resp_1")
    _save(store, "resp_3", previous="resp_2")
    assert [r.id for r in store.chain("t1", "resp_3")] == ["resp_1", "resp_2", "resp_3"]
    with pytest.raises(NotFound, match="no response with id"):
        store.chain("t2", "resp_3")
    store.delete("t1", "resp_2")
    with pytest.raises(NotFound, match="continues 'resp_2', which is no longer stored"):
        store.chain("t1", "resp_3")


def test_a_chain_longer_than_the_limit_is_refused(store, monkeypatch):
    monkeypatch.setattr("storage.responses.MAX_CHAIN", 3)
    previous = None
    for n in range(4):
        _save(store, f"resp_{n}", previous=previous)
        previous = f"resp_{n}"
    assert len(store.chain("t1", "resp_2")) == 3
    with pytest.raises(InvalidRequest, match="longer than 3"):
        store.chain("t1", "resp_3")
    assert MAX_CHAIN >= 100


def test_input_items_page_in_either_order(store):
    items = [{"id": f"msg_{n}", "type": "message", "role": "user", "content": f"turn {n}"} for n in range(5)]
    _save(store, "resp_p", items=items)
    newest = store.input_items("t1", "resp_p", limit=2)
    assert ([i["id"] for i in newest.data], newest.has_more) == (["msg_4", "msg_3"], True)
    rest = store.input_items("t1", "resp_p", after="msg_3", limit=10)
    assert ([i["id"] for i in rest.data], rest.has_more) == (["msg_2", "msg_1", "msg_0"], False)
    oldest = store.input_items("t1", "resp_p", order="asc", limit=5)
    assert oldest.wire() == {
        "object": "list", "data": items, "first_id": "msg_0", "last_id": "msg_4", "has_more": False,
    }  # fmt: skip
    for bad in ({"limit": 0}, {"limit": 101}, {"order": "up"}, {"after": "msg_9"}):
        with pytest.raises(InvalidRequest):
            store.input_items("t1", "resp_p", **bad)
    with pytest.raises(NotFound):
        store.input_items("t2", "resp_p")


def test_deleting_a_response_deletes_the_media_no_other_response_uses(store):
    _save(store, "resp_x", media={SHA_PNG: PNG, SHA_WAV: WAV}, items=_items(SHA_PNG, SHA_WAV))
    _save(store, "resp_y", media={SHA_PNG: PNG})
    store.delete("t1", "resp_x")
    with pytest.raises(NotFound):
        store.get("t1", "resp_x")
    assert store.blobs.get(SHA_PNG) == PNG  # resp_y still uses it
    with pytest.raises(BlobMissing):
        store.blobs.get(SHA_WAV)
    with pytest.raises(NotFound):
        store.delete("t2", "resp_y")  # another tenant's: not found, and nothing deleted
    store.delete("t1", "resp_y")
    with pytest.raises(BlobMissing):
        store.blobs.get(SHA_PNG)


def test_the_sweep_deletes_what_is_past_its_retention(store, clock):
    _save(store, "resp_old", retention=1, media={SHA_PNG: PNG})
    _save(store, "resp_new", retention=30)
    assert store.sweep() == 0
    clock.now += timedelta(days=2)
    with pytest.raises(NotFound):
        store.get("t1", "resp_old")  # past retention: gone for the API before the sweep runs
    assert store.sweep(batch=1) == 1
    assert store.sweep() == 0
    assert store.get("t1", "resp_new").id == "resp_new"
    with pytest.raises(BlobMissing):
        store.blobs.get(SHA_PNG)


def test_media_whose_bytes_do_not_match_their_digest_are_refused(store):
    with pytest.raises(ValueError, match="do not match"):
        _save(store, "resp_bad", media={SHA_WAV: PNG})


def test_the_blob_store_writes_whole_files_and_checks_them(tmp_path):
    blobs = BlobStore(tmp_path)
    digest = blobs.put(PNG)
    assert digest == SHA_PNG
    assert blobs.put(PNG) == digest  # the same content twice is one file
    assert blobs.path(digest).read_bytes() == PNG
    assert not list(tmp_path.rglob(".partial-*"))
    blobs.path(digest).write_bytes(b"changed")
    with pytest.raises(BlobMissing, match="no longer match"):
        blobs.get(digest)
    with pytest.raises(ValueError, match="not a sha256"):
        blobs.path("../etc/passwd")
