import asyncio
import ipaddress

import httpx
import numpy as np
import pytest

from serving.errors import MediaError
from serving.media.audio import AudioLoader
from serving.media.fetch import FetchPolicy, MediaFetcher
from serving.media.images import ImageLoader
from tests import media


def _policy(allow: tuple[str, ...] = ()) -> FetchPolicy:
    return FetchPolicy.build(timeout_s=2, max_bytes=1000, max_redirects=2, allow=allow)


def _images() -> ImageLoader:
    return ImageLoader(max_pixels=10_000_000, fetcher=MediaFetcher(httpx.AsyncClient(), _policy()))


def _code(exc: pytest.ExceptionInfo[MediaError]) -> str:
    return exc.value.code


def test_image_hash_ignores_metadata_and_container():
    img = media.image(3, (64, 48))
    png = media.png_bytes(img)
    buf = __import__("io").BytesIO()
    img.save(buf, "PNG", pnginfo=__import__("PIL.PngImagePlugin").PngImagePlugin.PngInfo())
    loader = _images()
    a = loader.load_bytes(png, param="p")
    b = loader.load_bytes(buf.getvalue(), param="p")
    c = loader.load_bytes(media.png_bytes(media.image(4, (64, 48))), param="p")
    assert a.content_hash == b.content_hash
    assert a.content_hash != c.content_hash
    assert len(a.content_hash) == 64
    assert a.size == (64, 48)


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (media.bomb_png(), "image_too_large"),
        (media.truncated_png(), "invalid_image"),
        (b"not an image at all", "invalid_image"),
        (b"", "invalid_image"),
    ],
)
def test_bad_images_are_refused(raw, code):
    with pytest.raises(MediaError) as exc:
        _images().load_bytes(raw, param="messages[0].content[0].image_url.url")
    assert _code(exc) == code
    assert exc.value.param == "messages[0].content[0].image_url.url"


def test_data_url_parsing():
    loader = _images()
    raw = media.png_bytes(media.image(0, (8, 8)))
    assert loader.parse_data_url(media.data_url(raw), param="p") == raw
    with pytest.raises(MediaError) as exc:
        loader.parse_data_url("data:image/png;base64,@@@not-base64@@@", param="p")
    assert _code(exc) == "invalid_base64"
    with pytest.raises(MediaError) as exc:
        loader.parse_data_url("data:text/plain;base64,aGVsbG8=", param="p")
    assert _code(exc) == "invalid_image"


@pytest.mark.parametrize(("rate", "fmt"), [(16000, "WAV"), (44100, "WAV"), (22050, "MP3")])
def test_audio_is_resampled_to_16k(rate, fmt):
    loader = AudioLoader(target_rate=16000, max_seconds=30)
    loaded = loader.load_bytes(media.audio_bytes(2.0, rate, fmt), fmt.lower(), param="p")
    assert loaded.sample_rate == 16000
    assert loaded.samples.dtype == np.float32
    assert abs(loaded.seconds - 2.0) < 0.06  # MP3 adds encoder padding


def test_audio_refusals():
    loader = AudioLoader(target_rate=16000, max_seconds=3)
    with pytest.raises(MediaError) as exc:
        loader.load_base64(media.audio_b64(), "flac", param="a")
    assert (_code(exc), exc.value.param) == ("unsupported_audio_format", "a.format")
    with pytest.raises(MediaError) as exc:
        loader.load_bytes(b"RIFF....garbage", "wav", param="a")
    assert _code(exc) == "invalid_audio"
    with pytest.raises(MediaError) as exc:
        loader.load_bytes(media.audio_bytes(5.0), "wav", param="a")
    assert _code(exc) == "audio_too_long"
    nan = __import__("io").BytesIO()
    __import__("soundfile").write(nan, np.full(16000, np.nan, dtype=np.float32), 16000, format="WAV", subtype="FLOAT")
    with pytest.raises(MediaError) as exc:
        loader.load_bytes(nan.getvalue(), "wav", param="a")
    assert _code(exc) == "invalid_audio"
    with pytest.raises(MediaError) as exc:
        loader.load_base64("***", "wav", param="a")
    assert (_code(exc), exc.value.param) == ("invalid_base64", "a.data")


def _wav_claiming_rate(rate: int) -> bytes:
    """A real 16 kHz WAV whose fmt chunk is rewritten to claim `rate` (and the matching byte rate)."""
    import struct

    raw = bytearray(media.audio_bytes(2.0, 16000, "WAV"))  # 32,000 frames: 0.17 s at 192 kHz
    assert raw[12:16] == b"fmt "
    raw[24:32] = struct.pack("<II", rate, rate * 2)  # mono 16-bit: two bytes a frame
    return bytes(raw)


def test_audio_sample_rate_is_capped_from_the_header_before_decoding(monkeypatch):
    import soundfile as sf

    loader = AudioLoader(target_rate=16000, max_seconds=30)
    assert loader.load_bytes(_wav_claiming_rate(192_000), "wav", param="a").sample_rate == 16000  # the cap itself

    def no_decode(*_, **__):
        raise AssertionError("an over-rate clip must be refused from its header, before any decode")

    monkeypatch.setattr(sf, "read", no_decode)
    with pytest.raises(MediaError) as exc:
        loader.load_bytes(_wav_claiming_rate(384_000), "wav", param="a")
    assert (_code(exc), exc.value.param) == ("invalid_audio", "a")
    assert "384000 Hz" in str(exc.value)


def test_audio_whose_header_claims_more_than_decodes_is_refused():
    """An MP3 cut after its Xing header: the header still claims 2 s, the frames decode to under 1 s."""
    loader = AudioLoader(target_rate=16000, max_seconds=30)
    whole = media.audio_bytes(2.0, 22050, "MP3")
    assert abs(loader.probe(whole[: len(whole) // 2], "mp3", param="a") - 2.0) < 0.06
    with pytest.raises(MediaError) as exc:
        loader.load_bytes(whole[: len(whole) // 2], "mp3", param="a")
    assert (_code(exc), exc.value.param) == ("audio_duration_mismatch", "a")
    # libsndfile clamps a WAV's data length to the bytes present, so an over-claiming WAV header is read as
    # what it holds: the probe and the decode agree and the clip is accepted at its true length.
    import struct

    wav = bytearray(media.audio_bytes(1.0, 16000, "WAV"))
    at = wav.index(b"data")
    wav[at + 4 : at + 8] = struct.pack("<I", 8 * 32000)  # claims 8 s of 16-bit mono
    loaded = AudioLoader(target_rate=16000, max_seconds=3).load_bytes(bytes(wav), "wav", param="a")
    assert abs(loaded.seconds - 1.0) < 0.01


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("8.8.8.8", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("192.168.0.7", False),
        ("169.254.169.254", False),
        ("::1", False),
        ("fe80::1", False),
        ("224.0.0.1", False),
    ],
)
def test_fetch_policy_refuses_private_targets(address, allowed):
    assert _policy().permits("example.test", ipaddress.ip_address(address)) is allowed


def test_fetch_policy_allow_list_by_host_and_cidr():
    policy = _policy(("localhost", "10.0.0.0/8"))
    assert policy.permits("localhost", ipaddress.ip_address("127.0.0.1"))
    assert not policy.permits("127.0.0.1", ipaddress.ip_address("127.0.0.1"))
    assert policy.permits("svc", ipaddress.ip_address("10.9.9.9"))


def test_fetcher_refuses_loopback_before_connecting():
    async def run():
        async with httpx.AsyncClient() as client:
            fetcher = MediaFetcher(client, _policy())
            with pytest.raises(MediaError) as exc:
                await fetcher.fetch("http://127.0.0.1:9/x.png", param="u")
            assert exc.value.code == "invalid_image_url"
            with pytest.raises(MediaError) as exc:
                await fetcher.fetch("ftp://example.com/x.png", param="u")
            assert exc.value.code == "invalid_image_url"

    asyncio.run(run())


def test_audio_must_be_what_it_is_declared():
    loader = AudioLoader(target_rate=16000, max_seconds=30)
    with pytest.raises(MediaError) as exc:
        loader.load_bytes(media.audio_bytes(1.0, 16000, "WAV"), "mp3", param="a.data")
    assert (_code(exc), exc.value.param) == ("audio_format_mismatch", "a.format")


def test_a_requests_images_share_one_decode_budget():
    import asyncio

    import httpx

    from serving.ingest import MediaIngest, plan_messages
    from serving.media.fetch import FetchPolicy, MediaFetcher

    policy = FetchPolicy.build(timeout_s=1, max_bytes=10**7, max_redirects=0, allow=())
    images = ImageLoader(max_pixels=10**6, fetcher=MediaFetcher(httpx.AsyncClient(), policy))
    ingest = MediaIngest(images, AudioLoader(target_rate=16000, max_seconds=30), workers=1, max_request_pixels=200_000)
    part = {"type": "image_url", "image_url": {"url": media.png_data_url(3, (320, 240))}}

    class Msg:
        role = "user"

        def __init__(self, n):
            from api.chat.protocol import ContentPart

            self.content = [ContentPart.model_validate(part) for _ in range(n)]

    assert len(asyncio.run(ingest.probe(plan_messages([Msg(2)], max_images=8)))) == 2  # 153,600 pixels
    with pytest.raises(MediaError) as exc:
        asyncio.run(ingest.probe(plan_messages([Msg(3)], max_images=8)))  # 230,400 pixels: each fits, all do not
    assert _code(exc) == "images_too_large"


def test_fetch_connects_to_the_address_it_checked_and_refuses_embedded_private_ones(monkeypatch):
    import asyncio
    import ipaddress

    import httpx

    from serving.media.fetch import FetchPolicy, MediaFetcher

    answers = iter([[("93.184.216.34", 80)], [("127.0.0.1", 80)]])  # public for the check, loopback after

    async def rebinding(host, port, **_):
        return [(2, 1, 6, "", addr) for addr in next(answers)]

    seen = []

    def handler(request):
        seen.append((request.url.host, request.headers["host"], request.extensions.get("sni_hostname")))
        return httpx.Response(200, content=b"pixels")

    policy = FetchPolicy.build(timeout_s=5, max_bytes=1000, max_redirects=0, allow=())
    fetcher = MediaFetcher(httpx.AsyncClient(transport=httpx.MockTransport(handler)), policy)

    async def run():
        monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", rebinding)
        return await fetcher.fetch("http://images.example/cat.png", param="p")

    assert asyncio.run(run()) == b"pixels"
    assert seen == [("93.184.216.34", "images.example", "images.example")]  # never the rebound 127.0.0.1
    for embedded in ("64:ff9b::7f00:1", "2002:7f00:1::", "::ffff:169.254.169.254", "64:ff9b::a00:1"):
        assert not policy.permits("x", ipaddress.ip_address(embedded)), embedded
    assert policy.permits("x", ipaddress.ip_address("64:ff9b::5db8:d822"))  # NAT64 of a public address


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("64:ff9b:1::7f00:1", False),  # local-use NAT64 of 127.0.0.1
        ("64:ff9b:1::a00:1", False),  # local-use NAT64 of 10.0.0.1
        ("64:ff9b:1::a9fe:a9fe", False),  # local-use NAT64 of 169.254.169.254
        ("64:ff9b:1::808:808", True),  # local-use NAT64 of a public address
        ("64:ff9b:1:7f00:0:100::", False),  # a longer local-use prefix: the embedded IPv4 cannot be located
        ("::7f00:1", False),  # IPv4-compatible 127.0.0.1
        ("::a00:1", False),  # IPv4-compatible 10.0.0.1
        ("::c0a8:7", False),  # IPv4-compatible 192.168.0.7
        ("::808:808", True),  # IPv4-compatible public address
        ("::ffff:0:7f00:1", False),  # IPv4-translated 127.0.0.1
        ("::ffff:0:a00:1", False),  # IPv4-translated 10.0.0.1
        ("fec0::1", False),  # deprecated site-local
        ("::", False),
        ("2606:4700::1111", True),
    ],
)
def test_fetch_policy_refuses_private_ipv4_in_every_ipv6_embedding(address, allowed):
    assert _policy().permits("example.test", ipaddress.ip_address(address)) is allowed


def test_large_base64_is_decoded_in_slices_with_the_same_verdicts():
    """Past one slice the data is decoded piecewise; what is accepted and refused stays the same."""
    import base64
    import os

    from serving.media.images import _BASE64_SLICE, decode_base64

    raw = os.urandom(_BASE64_SLICE)  # about 1.3 slices of text
    text = base64.b64encode(raw).decode()
    assert len(text) > _BASE64_SLICE
    assert decode_base64(text, param="p") == raw
    assert decode_base64(f"  {text}\n", param="p") == raw
    for bad in (text[:-1], text[:1000] + "=" + text[1001:], text[:5000] + "\n" + text[5000:], text[:-4] + "@@@@"):
        with pytest.raises(MediaError):
            decode_base64(bad, param="p")
