"""Image loading: decode once, refuse bombs and truncation, normalise to RGB and hash the pixels."""

from __future__ import annotations

import binascii
import hashlib
import io
import re
import warnings
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from serving.errors import MediaError
from serving.media.fetch import MediaFetcher

_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^,;]*)*?);base64,(?P<data>.*)$", re.DOTALL)


@dataclass(frozen=True)
class LoadedImage:
    image: Image.Image
    content_hash: str  # sha256 over the canonical RGB pixels and size: metadata never changes it

    @property
    def size(self) -> tuple[int, int]:
        return self.image.size


# Base64 is decoded in slices of this many characters (a multiple of 4): each slice holds the interpreter lock
# for well under a millisecond, so a worker thread decoding megabytes never stalls the event loop for long.
_BASE64_SLICE = 256 * 1024


def decode_base64(data: str, *, param: str) -> bytes:
    try:
        text = data.strip().encode("ascii")
        if len(text) <= _BASE64_SLICE:
            return binascii.a2b_base64(text, strict_mode=True)
        if text.find(b"=", 0, len(text) - 2) != -1:
            raise binascii.Error("padding before the end of the data")
        if len(text) % 4:
            raise binascii.Error("the data's length is not a multiple of 4")
        return b"".join(
            binascii.a2b_base64(text[i : i + _BASE64_SLICE], strict_mode=True)
            for i in range(0, len(text), _BASE64_SLICE)
        )
    except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
        raise MediaError(f"invalid base64 data: {exc}", code="invalid_base64", param=param) from exc


class ImageLoader:
    def __init__(self, *, max_pixels: int, fetcher: MediaFetcher) -> None:
        self._max_pixels = max_pixels
        self._fetcher = fetcher

    def parse_data_url(self, url: str, *, param: str) -> bytes:
        match = _DATA_URL.match(url)
        if not match:
            raise MediaError(
                "a data: URL must be of the form data:<mime>;base64,<data>", code="invalid_image_url", param=param
            )
        mime = match.group("mime") or ""
        if mime and not mime.startswith("image/"):
            raise MediaError(f"data URL has type {mime!r}, expected an image", code="invalid_image", param=param)
        return decode_base64(match.group("data"), param=param)

    async def load_url_bytes(self, url: str, *, param: str) -> bytes:
        if url.startswith("data:"):
            return self.parse_data_url(url, param=param)
        return await self._fetcher.fetch(url, param=param)

    def probe(self, raw: bytes, *, param: str) -> tuple[int, int]:
        """Width and height from the header alone, refusing bombs before any pixel is decoded."""
        if not raw:
            raise MediaError("the image is empty", code="invalid_image", param=param)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                with Image.open(io.BytesIO(raw)) as img:
                    width, height = img.size
        except Image.DecompressionBombError as exc:
            raise MediaError("the image expands to too many pixels", code="image_too_large", param=param) from exc
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError) as exc:
            raise MediaError(f"the image cannot be decoded: {exc}", code="invalid_image", param=param) from exc
        if width * height > self._max_pixels:
            raise MediaError(
                f"the image is {width}x{height} pixels, over the limit of {self._max_pixels}",
                code="image_too_large",
                param=param,
            )
        return width, height

    def load_bytes(self, raw: bytes, *, param: str) -> LoadedImage:
        """Decode and validate; blocking, so callers run it on the media thread pool."""
        if not raw:
            raise MediaError("the image is empty", code="invalid_image", param=param)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                img = Image.open(io.BytesIO(raw))
                width, height = img.size
                if width * height > self._max_pixels:
                    raise MediaError(
                        f"the image is {width}x{height} pixels, over the limit of {self._max_pixels}",
                        code="image_too_large",
                        param=param,
                    )
                img.load()
        except MediaError:
            raise
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise MediaError("the image expands to too many pixels", code="image_too_large", param=param) from exc
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError) as exc:
            raise MediaError(f"the image cannot be decoded: {exc}", code="invalid_image", param=param) from exc
        rgb = ImageOps.exif_transpose(img).convert("RGB")
        rgb.info.clear()
        digest = hashlib.sha256(f"{rgb.width}x{rgb.height}:".encode() + rgb.tobytes()).hexdigest()
        return LoadedImage(rgb, digest)
