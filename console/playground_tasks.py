"""The playground's other two modes: transcribe a clip (uploaded or recorded) on a transcription pool, and embed
texts on an embedding pool. Both go through the API's own paths (`api.audio.service`, `api.embeddings.service`)
as the signed-in tenant, so they are limited, metered and billed like any request; each answers with an HTML
fragment the playground shows in place of a chat answer."""

from __future__ import annotations

import asyncio
import math
from typing import Annotated, Any

from litestar import Controller, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency
from litestar.enums import MediaType, RequestEncodingType
from litestar.params import Body
from litestar.response import Template

from api.audio.service import Transcriber, read_form
from api.embeddings.protocol import EmbeddingRequest
from api.embeddings.service import create_embeddings
from api.errors import error_response
from config.settings import Settings
from serving.errors import InvalidRequest
from serving.task_lease import TaskService
from tenancy.directory import Principal
from tenancy.quotas import QuotaGate

MAX_TABLE = 8  # inputs whose cosine similarities the table shows, each against each


def _fragment(template: str, **context: Any) -> Template:
    return Template(template, context=context, media_type=MediaType.HTML, headers={"cache-control": "no-store"})


def similarity_table(vectors: list[list[float]]) -> tuple[list[float], list[list[float]]]:
    """Each vector's norm, and the cosine similarity of each pair (of at most `MAX_TABLE` vectors)."""
    norms = [math.sqrt(sum(x * x for x in v)) for v in vectors]
    shown = vectors[:MAX_TABLE]
    table = [
        [sum(x * y for x, y in zip(a, b, strict=True)) / ((norms[i] * norms[j]) or 1.0) for j, b in enumerate(shown)]
        for i, a in enumerate(shown)
    ]
    return norms, table


class PlaygroundTasksController(Controller):
    path = "/console/playground"

    @post("/transcribe", status_code=200)
    async def transcribe(
        self,
        signed_in: NamedDependency[Principal],
        transcriber: NamedDependency[Transcriber],
        data: Annotated[dict[str, Any], Body(media_type=RequestEncodingType.MULTI_PART)],
    ) -> Any:
        try:
            upload = data.get("audio")
            raw, name = None, None
            if isinstance(upload, UploadFile) and upload.filename:
                raw = await upload.read(transcriber.max_bytes + 1)
                transcriber.check_size(len(raw))
                name = upload.filename
            form = {
                "model": data.get("model"),
                "prompt": data.get("hint") or "",
                "temperature": data.get("temperature") or "0",
                "response_format": "verbose_json",
            }
            speech = read_form(form, "transcriptions", raw, name)
            body, _, request_id = await transcriber.answer(speech, signed_in)
            assert isinstance(body, dict)
            return _fragment("console/_transcript.html.jinja2", t=body, request_id=request_id, model=speech.model)
        except Exception as exc:
            return error_response(exc)

    @post("/embed", status_code=200)
    async def embed(
        self,
        signed_in: NamedDependency[Principal],
        task_service: NamedDependency[TaskService],
        quotas: NamedDependency[QuotaGate],
        settings: NamedDependency[Settings],
        data: Annotated[dict[str, Any], Body(media_type=RequestEncodingType.MULTI_PART)],
    ) -> Any:
        try:
            texts = [line.strip() for line in str(data.get("texts") or "").splitlines() if line.strip()]
            if not texts:
                raise InvalidRequest("write at least one text, one per line", param="texts")
            req = EmbeddingRequest(model=str(data.get("model") or ""), input=texts)
            body, request_id = await create_embeddings(
                req, signed_in, task_service, quotas, max_inputs=settings.max_embedding_inputs
            )
            vectors = [d["embedding"] for d in body["data"]]
            norms, table = await asyncio.to_thread(similarity_table, vectors)
            return _fragment(
                "console/_embeddings.html.jinja2",
                texts=texts,
                dims=len(vectors[0]),
                norms=norms,
                table=table,
                shown=texts[:MAX_TABLE],
                usage=body["usage"],
                model=body["model"],
                request_id=request_id,
            )
        except Exception as exc:
            return error_response(exc)
