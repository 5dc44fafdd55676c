"""Every 4xx the API promises: status, type, code and param, and the engine keeps serving afterwards."""

from __future__ import annotations

import base64
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests import media, openai_wire
from tests.conftest import API_KEY, MAX_BODY_BYTES


def _user(*parts):
    return [{"role": "user", "content": list(parts)}]


def _img_url(url):
    return {"type": "image_url", "image_url": {"url": url}}


def _audio(data, fmt="wav"):
    return {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}


TEXT = {"type": "text", "text": "hi"}
IMG_PARAM = "messages[0].content[1].image_url.url"
AUDIO_PARAM = "messages[0].content[1].input_audio"

# (case id, body overrides, status, type, code, param)
CASES = [
    (
        "corrupt-base64",
        {"messages": _user(TEXT, _img_url("data:image/png;base64,%%%not base64%%%"))},
        400,
        "invalid_request_error",
        "invalid_base64",
        IMG_PARAM,
    ),
    (
        "undecodable-image",
        {"messages": _user(TEXT, _img_url(media.data_url(b"definitely not an image")))},
        400,
        "invalid_request_error",
        "invalid_image",
        IMG_PARAM,
    ),
    (
        "truncated-image",
        {"messages": _user(TEXT, _img_url(media.data_url(media.truncated_png())))},
        400,
        "invalid_request_error",
        "invalid_image",
        IMG_PARAM,
    ),
    (
        "decompression-bomb",
        {"messages": _user(TEXT, _img_url(media.data_url(media.bomb_png())))},
        400,
        "invalid_request_error",
        "image_too_large",
        IMG_PARAM,
    ),
    (
        "unsupported-audio-format",
        {"messages": _user(TEXT, _audio(media.audio_b64(), "flac"))},
        400,
        "invalid_request_error",
        "unsupported_audio_format",
        AUDIO_PARAM + ".format",
    ),
    (
        "undecodable-audio",
        {"messages": _user(TEXT, _audio(base64.b64encode(b"RIFF-not-really").decode()))},
        400,
        "invalid_request_error",
        "invalid_audio",
        AUDIO_PARAM + ".data",
    ),
    (
        "unknown-part-type",
        {"messages": _user(TEXT, {"type": "video_url", "video_url": {"url": "x"}})},
        400,
        "invalid_request_error",
        "invalid_content_part",
        "messages[0].content[1].type",
    ),
    (
        "too-many-images",
        {"messages": _user(TEXT, *[_img_url(media.png_data_url(i, (32, 32))) for i in range(9)])},
        400,
        "invalid_request_error",
        "too_many_images",
        "messages",
    ),
    (
        "modality-the-model-lacks",
        {"model": "large", "messages": _user(TEXT, _audio(media.audio_b64()))},
        400,
        "invalid_request_error",
        "unsupported_modality",
        "model",
    ),
    (
        "message-without-content",
        {"messages": [{"role": "user"}]},
        400,
        "invalid_request_error",
        "missing_content",
        "messages[0].content",
    ),
    ("schema-missing-messages", {"messages": None}, 400, "invalid_request_error", "missing_field", "messages"),
    ("schema-bad-temperature", {"temperature": 7}, 400, "invalid_request_error", "invalid_value", "temperature"),
    ("unknown-model", {"model": "gpt-9"}, 404, "invalid_request_error", "model_not_found", "model"),
    (
        "ssrf-loopback",
        {"messages": _user(TEXT, _img_url("http://127.0.0.1:9/secret.png"))},
        400,
        "invalid_request_error",
        "invalid_image_url",
        IMG_PARAM,
    ),
    (
        "ssrf-link-local",
        {"messages": _user(TEXT, _img_url("http://169.254.169.254/latest/meta-data"))},
        400,
        "invalid_request_error",
        "invalid_image_url",
        IMG_PARAM,
    ),
    (
        "ssrf-private",
        {"messages": _user(TEXT, _img_url("http://10.0.0.1/x.png"))},
        400,
        "invalid_request_error",
        "invalid_image_url",
        IMG_PARAM,
    ),
    (
        "max-tokens-beyond-any-context",
        {"max_tokens": 10**30},
        400,
        "invalid_request_error",
        "context_length_exceeded",
        "max_tokens",
    ),
    (
        "prompt-longer-than-context",
        {"messages": [{"role": "user", "content": "word " * 5000}]},
        400,
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    ),
]


def _post(server, body, key=API_KEY, **kw):
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return openai_wire.post(server.v1 + "/chat/completions", json=body, headers=headers, timeout=120, **kw)


def _base(**overrides):
    body = {"model": "small", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


def _assert_error(resp, status, type_, code, param):
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert (err["type"], err["code"], err["param"]) == (type_, code, param), err
    assert isinstance(err["message"], str)
    assert err["message"]


def _assert_still_serving(server):
    ok = _post(server, _base())
    assert ok.status_code == 200, ok.text
    assert ok.json()["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize(("case", "overrides", "status", "type_", "code", "param"), CASES, ids=[c[0] for c in CASES])
def test_bad_input(server, case, overrides, status, type_, code, param):
    _assert_error(_post(server, _base(**overrides)), status, type_, code, param)
    _assert_still_serving(server)


@pytest.mark.parametrize("key", [None, "sk-wrong"])
def test_missing_or_wrong_key(server, key):
    _assert_error(_post(server, _base(), key=key), 401, "authentication_error", "invalid_api_key", None)


def test_invalid_json(server):
    resp = openai_wire.post(
        server.v1 + "/chat/completions",
        content=b"{oops",
        headers={"authorization": f"Bearer {API_KEY}", "content-type": "application/json"},
    )
    _assert_error(resp, 400, "invalid_request_error", "invalid_json", None)


def test_body_over_limit_is_413(server):
    big = "x" * (MAX_BODY_BYTES + 1024)
    resp = _post(server, _base(messages=[{"role": "user", "content": big}]))
    _assert_error(resp, 413, "invalid_request_error", "payload_too_large", None)
    _assert_still_serving(server)


class _MediaHandler(BaseHTTPRequestHandler):
    png = media.png_bytes(media.image(21))

    def do_GET(self):
        if self.path == "/cat.png":
            self.send_response(200)
            self.send_header("content-type", "image/png")
            self.send_header("content-length", str(len(self.png)))
            self.end_headers()
            self.wfile.write(self.png)
        elif self.path == "/hop":
            self.send_response(302)
            self.send_header("location", "/cat.png")
            self.end_headers()
        elif self.path == "/to-loopback-ip":
            self.send_response(302)
            self.send_header("location", f"http://127.0.0.1:{self.server.server_port}/cat.png")
            self.end_headers()
        elif self.path == "/huge":
            self.send_response(200)
            self.send_header("content-length", str(64 * 1024 * 1024))
            self.end_headers()
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def media_host():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _MediaHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://localhost:{httpd.server_port}"
    httpd.shutdown()


def test_image_url_fetch_on_allow_listed_host(server, media_host):
    resp = _post(server, _base(messages=_user(TEXT, _img_url(media_host + "/hop"))))
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"]["prompt_tokens_details"]["image_tokens"] == 54


def test_redirect_to_a_refused_address_is_checked_per_hop(server, media_host):
    resp = _post(server, _base(messages=_user(TEXT, _img_url(media_host + "/to-loopback-ip"))))
    _assert_error(resp, 400, "invalid_request_error", "invalid_image_url", IMG_PARAM)


def test_fetch_byte_cap_and_missing(server, media_host):
    _assert_error(
        _post(server, _base(messages=_user(TEXT, _img_url(media_host + "/huge")))),
        400,
        "invalid_request_error",
        "media_too_large",
        IMG_PARAM,
    )
    _assert_error(
        _post(server, _base(messages=_user(TEXT, _img_url(media_host + "/nope.png")))),
        400,
        "invalid_request_error",
        "media_fetch_failed",
        IMG_PARAM,
    )
