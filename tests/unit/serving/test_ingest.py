import pytest

from api.chat.protocol import ChatMessage
from serving.errors import RequestShapeError
from serving.ingest import plan_messages


def _msgs(*raw):
    return [ChatMessage.model_validate(m) for m in raw]


def test_plan_keeps_client_order_of_media_and_text():
    plan = plan_messages(
        _msgs(
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "first"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                    {"type": "text", "text": "then"},
                    {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/b.png"}},
                ],
            },
        ),
        max_images=4,
    )
    assert [p["type"] for p in plan.messages[1]["content"]] == ["text", "image", "text", "audio", "image"]
    assert [m.kind for m in plan.media] == ["image", "audio", "image"]
    assert plan.media[2].param == "messages[1].content[4].image_url.url"
    assert plan.modalities == {"text", "image", "audio"}


@pytest.mark.parametrize(
    ("messages", "code", "param"),
    [
        ([{"role": "user", "content": None}], "missing_content", "messages[0].content"),
        ([{"role": "user", "content": []}], "missing_content", "messages[0].content"),
        (
            [{"role": "user", "content": [{"type": "video_url", "video_url": {}}]}],
            "invalid_content_part",
            "messages[0].content[0].type",
        ),
        (
            [{"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            "invalid_content_part",
            "messages[0].content[0].type",
        ),
        ([{"role": "user", "content": [{"type": "text"}]}], "invalid_content_part", "messages[0].content[0].text"),
    ],
)
def test_plan_refuses_bad_shapes(messages, code, param):
    with pytest.raises(RequestShapeError) as exc:
        plan_messages(_msgs(*messages), max_images=4)
    assert (exc.value.code, exc.value.param) == (code, param)


def test_plan_limits_media_counts():
    img = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
    aud = {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}
    with pytest.raises(RequestShapeError) as exc:
        plan_messages(_msgs({"role": "user", "content": [img] * 3}), max_images=2)
    assert exc.value.code == "too_many_images"
    with pytest.raises(RequestShapeError) as exc:
        plan_messages(_msgs({"role": "user", "content": [aud, aud]}), max_images=2)
    assert exc.value.code == "too_many_audio_clips"
