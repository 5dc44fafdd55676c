"""Fusion: the request as ordered segments, with prefix hashes chained over them."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from serving.ingest import MessagePlan


@dataclass(frozen=True)
class Segment:
    kind: str  # text | image | audio
    digest: str  # sha256 of the text, or the medium's cache key


def segments_of(plan: MessagePlan, media_keys: Sequence[str]) -> list[Segment]:
    """The request as an ordered list of text and media segments, in the client's order."""
    if len(media_keys) != len(plan.media):
        raise ValueError("one key per media item is required")
    keys = iter(media_keys)
    out: list[Segment] = []
    for message in plan.messages:
        header = f"<{message['role']}>"
        out.append(Segment("text", hashlib.sha256(header.encode()).hexdigest()))
        content = message["content"]
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for part in parts:
            if part["type"] == "text":
                out.append(Segment("text", hashlib.sha256(part["text"].encode()).hexdigest()))
            else:
                out.append(Segment(part["type"], next(keys)))
    return out


def prefix_hashes(segments: Sequence[Segment]) -> list[str]:
    """hash_i = sha256(hash_{i-1} || kind || digest): equal prefixes give equal hashes, and a changed
    medium changes every hash from its position on."""
    running = hashlib.sha256()
    hashes = []
    for seg in segments:
        running.update(seg.kind.encode() + b"\0" + seg.digest.encode() + b"\0")
        hashes.append(running.copy().hexdigest())
    return hashes
