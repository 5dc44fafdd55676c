"""A stored response's items and media without an engine: media bytes are taken from what serving kept under its
chat `param`, stored once by content hash, and replayed as data URLs when a later turn continues the
conversation; the request's own items start after the replayed ones."""

from __future__ import annotations

import base64
import hashlib
import json
from types import SimpleNamespace

import pytest

from api.responses.parsing import parse_responses_request, to_conversation
from api.responses.storing import earlier_turns, keep, listed, own_items, stores
from serving.errors import InvalidRequest
from storage.blobs import BlobStore
from storage.responses import ResponseStore
from tenancy.directory import Principal
from tests.dbs import migrated

PNG = b"\x89PNG\r\n\x1a\n fetched from a URL"
INLINE = b"\x89PNG\r\n\x1a\n sent inline"
WAV = b"RIFF inline audio"


def _principal(store_responses: bool = True) -> Principal:
    quota = SimpleNamespace(store_responses=store_responses, response_retention_days=7)
    return Principal("key-1", "t1", "acme", False, None, quota)  # type: ignore[arg-type]


def _request(**body):
    return parse_responses_request(json.dumps({"model": "small", **body}).encode())


@pytest.fixture
def store(tmp_path):
    for db in migrated("sqlite", tmp_path):
        yield ResponseStore(db, BlobStore(tmp_path / "files"))


def _turn(store, req, earlier, served, response_id):
    """Stores `req` as serving would have answered it, with `served` as the media bytes it kept (chat params)."""
    full = req.model_copy(update={"input": [*earlier, *own_items(req)]}) if earlier else req
    conversation = to_conversation(full)
    completion = SimpleNamespace(request_id=f"chatcmpl-{response_id}", submission=SimpleNamespace(media=served))
    body = {"id": response_id, "model": "small", "status": "completed", "output": [_answer(response_id)]}
    keep(_principal(), req, body, completion, len(earlier), conversation.param, store=store, conversations=None)  # type: ignore[arg-type]


def _answer(text: str) -> dict:
    content = [{"type": "output_text", "text": f"answer {text}", "annotations": [], "logprobs": []}]
    return {"id": f"msg_{text}", "type": "message", "status": "completed", "role": "assistant", "content": content}


def test_media_are_stored_by_hash_and_replayed_as_data_urls(store):
    parts = [
        {"type": "input_text", "text": "Compare these."},
        {"type": "input_image", "image_url": "https://example.org/a.png"},
        {"type": "input_image", "image_url": "data:image/png;base64," + base64.b64encode(INLINE).decode()},
        {"type": "input_audio", "input_audio": {"data": base64.b64encode(WAV).decode(), "format": "wav"}},
    ]
    req = _request(input=[{"role": "user", "content": parts}], instructions="Be brief.")
    served = (
        ("messages[1].content[1].image_url.url", PNG),  # instructions are messages[0]
        ("messages[1].content[2].image_url.url", INLINE),
        ("messages[1].content[3].input_audio", WAV),
    )
    _turn(store, req, [], served, "resp_1")
    (item,) = store.get("t1", "resp_1").input_items
    kept = item["content"]
    assert kept[1] == {
        "type": "input_image",
        "image_url": "https://example.org/a.png",
        "media": {"sha256": hashlib.sha256(PNG).hexdigest(), "mime": "image/png"},
    }
    assert kept[2]["image_url"] is None  # a data URL keeps only its hash
    assert kept[3] == {
        "type": "input_audio",
        "input_audio": {"format": "wav"},
        "media": {"sha256": hashlib.sha256(WAV).hexdigest()},
    }
    assert store.blobs.get(hashlib.sha256(PNG).hexdigest()) == PNG

    shown = listed(store.blobs, [item])[0]["content"]
    assert base64.b64decode(shown[1]["image_url"].split(",", 1)[1]) == PNG  # never fetched again
    assert shown[3]["input_audio"] == {"format": "wav", "data": base64.b64encode(WAV).decode()}

    replayed = earlier_turns(store, _principal(), "resp_1")
    assert [i.role for i in replayed] == ["user", "assistant"]
    assert replayed[1].content[0].text == "answer resp_1"


def test_a_continued_turn_stores_only_its_own_items_and_media(store):
    first = _request(input="Hello.")
    _turn(store, first, [], (), "resp_1")
    earlier = earlier_turns(store, _principal(), "resp_1")
    image = {"type": "input_image", "image_url": "data:image/png;base64," + base64.b64encode(INLINE).decode()}
    second = _request(input=[{"role": "user", "content": [image]}], previous_response_id="resp_1")
    _turn(store, second, earlier, (("messages[2].content[0].image_url.url", INLINE),), "resp_2")
    (own,) = store.get("t1", "resp_2").input_items
    assert own["content"][0]["media"]["sha256"] == hashlib.sha256(INLINE).hexdigest()
    assert [r.id for r in store.chain("t1", "resp_2")] == ["resp_1", "resp_2"]
    assert [i.role for i in earlier_turns(store, _principal(), "resp_2")] == ["user", "assistant", "user", "assistant"]


def test_storage_follows_the_request_and_the_tenant(store):
    assert stores(_request(input="x"), _principal()) is True
    assert stores(_request(input="x", store=False), _principal()) is False
    assert stores(_request(input="x"), _principal(store_responses=False)) is False
    with pytest.raises(InvalidRequest, match="store_responses") as exc:
        stores(_request(input="x", store=True), _principal(store_responses=False))
    assert exc.value.param == "store"


def test_a_key_without_a_tenant_stores_nothing_and_cannot_ask_to():
    operator = Principal("key-admin", None, None, True, None, None)
    assert stores(_request(input="x"), operator) is False
    for body in ({"store": True}, {"previous_response_id": "resp_1"}):
        with pytest.raises(InvalidRequest, match="belong to a tenant"):
            stores(_request(input="x", **body), operator)
