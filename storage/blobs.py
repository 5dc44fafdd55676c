"""Media bytes by content: files named by their sha256 on a folder every gateway replica reaches (a shared volume;
a local folder in the embedded default). Writes are atomic (a temporary file renamed into place), so a reader on
any replica sees a whole blob or none, and writing the same content twice is harmless."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def write_atomically(target: Path, data: bytes) -> None:
    """Writes `data` to `target` through a temporary file renamed into place: a reader sees all of it or none."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".partial-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class BlobMissing(Exception):
    """A blob the database names is not on the volume (deleted, or the volume is not the shared one)."""


class BlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha256: str) -> Path:
        if not _SHA256.match(sha256):
            raise ValueError(f"not a sha256 digest: {sha256!r}")
        return self.root / sha256[:2] / sha256

    def put(self, data: bytes) -> str:
        """Stores `data` under its sha256, which it returns."""
        digest = hashlib.sha256(data).hexdigest()
        target = self.path(digest)
        if not target.is_file():
            write_atomically(target, data)
        return digest

    def get(self, sha256: str) -> bytes:
        try:
            data = self.path(sha256).read_bytes()
        except FileNotFoundError:
            raise BlobMissing(sha256) from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise BlobMissing(f"{sha256} (its bytes no longer match their digest)")
        return data

    def delete(self, sha256: str) -> None:
        self.path(sha256).unlink(missing_ok=True)
