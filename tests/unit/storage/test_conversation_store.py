"""Conversations on SQLite and PostgreSQL: kept per tenant, items in append order and paged both ways, concurrent
appends each landing whole, items and conversations deleted with the media nothing else uses, and swept past their
retention on a clock the test moves."""

from __future__ import annotations

import hashlib
import threading
from datetime import timedelta

import pytest

from serving.errors import InvalidRequest, NotFound
from storage.blobs import BlobMissing, BlobStore
from storage.conversations import Appended, ConversationStore
from storage.responses import ResponseStore

PNG = b"\x89PNG fake image bytes"
SHA_PNG = hashlib.sha256(PNG).hexdigest()


@pytest.fixture
def store(db, tmp_path, clock):
    return ConversationStore(db, BlobStore(tmp_path / "files"), clock)


def _text(text: str, item_id: str | None = None, role: str = "user") -> dict:
    item = {"type": "message", "role": role, "status": "completed", "content": [{"type": "input_text", "text": text}]}
    return {**item, "id": item_id} if item_id else item


def _image(item_id: str) -> dict:
    part = {"type": "input_image", "image_url": None, "media": {"sha256": SHA_PNG, "mime": "image/png"}}
    return {"id": item_id, "type": "message", "role": "user", "status": "completed", "content": [part]}


def _texts(store, tenant, conversation_id) -> list[str]:
    return [i["content"][0].get("text") for i in store.all_items(tenant, conversation_id)]


def test_a_conversation_is_its_tenants_alone_and_keeps_its_metadata(store):
    row = store.create("t1", {"topic": "shapes"}, Appended([_text("hello")], {}), retention_days=30)
    assert row.id.startswith("conv_")
    assert row.meta == {"topic": "shapes"}
    assert row.next_seq == 1
    assert store.update("t1", row.id, {"topic": "colours"}).meta == {"topic": "colours"}
    for call in (
        lambda: store.get("t2", row.id),
        lambda: store.items("t2", row.id),
        lambda: store.append("t2", row.id, Appended([_text("x")], {}), retention_days=30),
        lambda: store.delete("t2", row.id),
        lambda: store.get("t1", "conv_missing"),
    ):
        with pytest.raises(NotFound):
            call()
    assert _texts(store, "t1", row.id) == ["hello"]


def test_items_page_both_ways_after_a_cursor(store):
    row = store.create("t1", {}, Appended([], {}), retention_days=30)
    added = store.append("t1", row.id, Appended([_text(str(i)) for i in range(5)], {}), retention_days=30)
    ids = [i["id"] for i in added]
    assert len(set(ids)) == 5
    assert all(i.startswith("msg_") for i in ids)
    first = store.items("t1", row.id, limit=2, order="asc")
    assert [i["id"] for i in first.data] == ids[:2]
    assert first.has_more
    rest = store.items("t1", row.id, after=ids[1], limit=10, order="asc")
    assert [i["id"] for i in rest.data] == ids[2:]
    assert not rest.has_more
    newest = store.items("t1", row.id, limit=2)
    assert [i["id"] for i in newest.data] == ids[:2:-1][:2]
    older = store.items("t1", row.id, after=ids[3], limit=10, order="desc")
    assert [i["id"] for i in older.data] == ids[2::-1]
    with pytest.raises(InvalidRequest) as bad:
        store.items("t1", row.id, after="msg_nowhere")
    assert bad.value.param == "after"
    with pytest.raises(InvalidRequest):
        store.items("t1", row.id, limit=0)


def test_an_items_own_id_is_kept_unless_the_conversation_holds_it(store):
    row = store.create("t1", {}, Appended([_text("a", "msg_given")], {}), retention_days=30)
    again = store.append(
        "t1", row.id, Appended([_text("b", "msg_given"), _text("c", "msg_new")], {}), retention_days=30
    )
    assert again[0]["id"] != "msg_given"
    assert again[1]["id"] == "msg_new"
    assert store.item("t1", row.id, "msg_given")["content"][0]["text"] == "a"


def test_concurrent_appends_each_land_whole_and_none_is_lost(store):
    row = store.create("t1", {}, Appended([], {}), retention_days=30)
    writers, per_writer = 6, 4
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            batch = [_text(f"{w}:{k}") for k in range(per_writer)]
            store.append("t1", row.id, Appended(batch, {}), retention_days=30)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    texts = _texts(store, "t1", row.id)
    assert len(texts) == writers * per_writer
    for start in range(0, len(texts), per_writer):  # each writer's items together and in their order
        chunk = texts[start : start + per_writer]
        writer = chunk[0].split(":")[0]
        assert chunk == [f"{writer}:{k}" for k in range(per_writer)]
    assert store.get("t1", row.id).next_seq == writers * per_writer


def test_media_go_with_the_last_item_or_response_that_uses_them(store, db, clock):
    responses = ResponseStore(db, store.blobs, clock)
    row = store.create("t1", {}, Appended([_image("msg_img"), _text("hi")], {SHA_PNG: PNG}), retention_days=30)
    responses.save(
        tenant_id="t1",
        body={"id": "resp_1", "model": "small", "status": "completed", "output": []},
        input_items=[_image("msg_r")],
        media={SHA_PNG: PNG},
        request_id="chatcmpl-1",
        retention_days=30,
        conversation_id=row.id,
    )
    store.delete_item("t1", row.id, "msg_img")
    assert store.blobs.get(SHA_PNG) == PNG  # the stored response still uses it
    assert responses.get("t1", "resp_1").conversation_id == row.id
    with pytest.raises(NotFound):
        store.item("t1", row.id, "msg_img")
    store.append("t1", row.id, Appended([_image("msg_img2")], {SHA_PNG: PNG}), retention_days=30)
    responses.delete("t1", "resp_1")
    assert store.blobs.get(SHA_PNG) == PNG  # the conversation uses it again
    store.delete("t1", row.id)
    with pytest.raises(BlobMissing):
        store.blobs.get(SHA_PNG)
    with pytest.raises(NotFound):
        store.get("t1", row.id)


def test_a_conversation_lives_its_retention_past_its_last_change(store, clock):
    kept = store.create("t1", {}, Appended([_image("msg_a")], {SHA_PNG: PNG}), retention_days=2)
    idle = store.create("t1", {}, Appended([_text("idle")], {}), retention_days=1)
    clock.now += timedelta(days=1, hours=12)
    store.append("t1", kept.id, Appended([_text("still here")], {}), retention_days=2)
    assert store.sweep() == 1
    with pytest.raises(NotFound):
        store.get("t1", idle.id)
    clock.now += timedelta(days=1)
    assert _texts(store, "t1", kept.id) == [None, "still here"]
    clock.now += timedelta(days=1, hours=1)
    assert store.sweep() == 1
    with pytest.raises(BlobMissing):
        store.blobs.get(SHA_PNG)
