"""OpenAI's transcription answers, as the OpenAPI document describes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from litestar.openapi.spec import OpenAPIMediaType, Operation, Reference, Schema
from litestar.openapi.spec.enums import OpenAPIType
from pydantic import BaseModel

from api.openapi import EVENT_SCHEMA


class DurationUsage(BaseModel):
    type: Literal["duration"] = "duration"
    seconds: int


class Transcription(BaseModel):
    """`response_format=json`; `verbose_json` adds `task`, `language`, `duration` and `segments`."""

    text: str
    usage: DurationUsage | None = None


_TEXT = Schema(type=OpenAPIType.STRING)


@dataclass
class SpeechOperation(Operation):
    """A transcription's success answer: JSON (`json`, `verbose_json`), text (`text`, `srt`, `vtt`), or server-sent
    events with `stream=true`."""

    def __post_init__(self) -> None:
        ok = (self.responses or {}).get("200")
        if ok is not None and not isinstance(ok, Reference) and ok.content is not None:
            for media_type in ("text/plain", "application/x-subrip", "text/vtt"):
                ok.content[media_type] = OpenAPIMediaType(schema=_TEXT)
            ok.content["text/event-stream"] = OpenAPIMediaType(schema=EVENT_SCHEMA)
