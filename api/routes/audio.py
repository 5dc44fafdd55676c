"""POST /v1/audio/transcriptions and /v1/audio/translations: OpenAI's multipart form, on a transcription pool."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Response, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency
from litestar.enums import RequestEncodingType
from litestar.params import Body

from api.audio.protocol import SpeechOperation, Transcription
from api.audio.service import Transcriber, read_form
from api.openapi import PRECHECK, answer, errors
from api.sse import SSE_HEADERS, EventStream
from tenancy.directory import Principal


async def _speech(
    endpoint: str, data: dict[str, Any], principal: Principal, transcriber: Transcriber
) -> Response[Any] | EventStream:
    upload = data.get("file")
    raw, filename = None, None
    if isinstance(upload, UploadFile):
        raw = await upload.read(transcriber.max_bytes + 1)
        transcriber.check_size(len(raw))
        filename = upload.filename
    form = read_form(data, endpoint, raw, filename)
    if form.stream:
        events = await transcriber.stream(form, principal)
        return EventStream(events, media_type="text/event-stream", headers=SSE_HEADERS)
    body, media_type, request_id = await transcriber.answer(form, principal)
    return Response(body, media_type=media_type, headers={"x-request-id": request_id})


@post(
    "/v1/audio/transcriptions",
    status_code=200,
    opt={PRECHECK: True},
    operation_class=SpeechOperation,
    responses={
        **answer(Transcription, "The transcript in the asked format."),
        **errors(400, 401, 403, 404, 413, 429, 503),
    },
    description="Speech to text in the spoken language: `json`, `text`, `srt`, `vtt` or `verbose_json` (timed "
    "segments); with `stream=true`, `transcript.text.delta` and `transcript.text.done` events.",
)
async def create_transcription(
    data: Annotated[dict[str, Any], Body(media_type=RequestEncodingType.MULTI_PART)],
    principal: NamedDependency[Principal],
    transcriber: NamedDependency[Transcriber],
) -> Response[Any] | EventStream:
    return await _speech("transcriptions", data, principal, transcriber)


@post(
    "/v1/audio/translations",
    status_code=200,
    opt={PRECHECK: True},
    operation_class=SpeechOperation,
    responses={
        **answer(Transcription, "The transcript in the asked format."),
        **errors(400, 401, 403, 404, 413, 429, 503),
    },
    description="Speech in any language to English text, on a multilingual transcription pool (an English-only "
    "pool refuses it with a 400 naming `model`).",
)
async def create_translation(
    data: Annotated[dict[str, Any], Body(media_type=RequestEncodingType.MULTI_PART)],
    principal: NamedDependency[Principal],
    transcriber: NamedDependency[Transcriber],
) -> Response[Any] | EventStream:
    return await _speech("translations", data, principal, transcriber)
