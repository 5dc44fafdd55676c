"""Console pages: sign-in, sign-out and the playground, which runs prompts through the API's own serving path."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.datastructures import UploadFile
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.response import Redirect, Template

from api.chat import chat_completion
from api.errors import error_response
from api.settings import Settings
from console.auth import TENANT_SESSION, remember
from console.pages import page
from serving.errors import InvalidRequest
from serving.pools import PoolRegistry
from serving.service import InferenceService
from tenancy.directory import Directory, Principal
from tenancy.quotas import QuotaGate

AUDIO_TYPES = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}


def _data_url(raw: bytes, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(raw).decode()


class ConsoleController(Controller):
    path = "/console"

    @get("/", name="console:home")
    async def home(self) -> Redirect:
        return Redirect("/console/playground")

    @get("/signin", name="console:signin")
    async def signin_page(self) -> Template:
        return page("console/signin.html.jinja2", area="signin")

    @post("/signin")
    async def signin(
        self,
        request: Request[Any, Any, Any],
        directory: Directory,
        data: Annotated[dict[str, str], Body(media_type=RequestEncodingType.URL_ENCODED)],
    ) -> Any:
        principal = await asyncio.to_thread(directory.resolve, data.get("api_key", "").strip())
        if principal is None or principal.tenant_id is None:
            return page("console/signin.html.jinja2", area="signin", error="That key is not valid.", status_code=401)
        remember(request, TENANT_SESSION, principal.key_id)
        return Redirect("/console/playground", status_code=303)

    @post("/signout")
    async def signout(self, request: Request[Any, Any, Any]) -> Redirect:
        remember(request, TENANT_SESSION, None)
        return Redirect("/console/signin", status_code=303)

    @get("/playground", name="console:playground")
    async def playground(self, request: Request[Any, Any, Any], signed_in: Principal, pools: PoolRegistry) -> Template:
        models = [p.name for p in pools.pools if signed_in.may_use(p.name)]
        return page(
            "console/playground.html.jinja2",
            area="tenant",
            active="playground",
            tenant=signed_in.tenant_name,
            models=[*models, "auto"],
            base_url=str(request.base_url).rstrip("/") + "/v1",
        )

    @post("/playground/run", status_code=200)
    async def run(
        self,
        signed_in: Principal,
        service: InferenceService,
        quotas: QuotaGate,
        settings: Settings,
        data: Annotated[dict[str, Any], Body(media_type=RequestEncodingType.MULTI_PART)],
    ) -> Any:
        """The form becomes an OpenAI request and goes through the same parsing, caller policy and serving as
        /v1: the playground is just another caller."""
        try:
            body = json.dumps(await _chat_body(data)).encode()
            return await chat_completion(
                body, signed_in, service, quotas, default_max_tokens=settings.default_max_tokens
            )
        except Exception as exc:
            return error_response(exc)


async def _chat_body(data: dict[str, Any]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    text = str(data.get("text") or "")
    if text:
        parts.append({"type": "text", "text": text})
    images = data.get("images") or []
    for upload in images if isinstance(images, list) else [images]:
        if isinstance(upload, UploadFile) and upload.filename:
            parts.append(
                {
                    "type": "image_url",
                    "image_url": {"url": _data_url(await upload.read(), upload.content_type or "image/png")},
                }
            )
    audio = data.get("audio")
    if isinstance(audio, UploadFile) and audio.filename:
        fmt = AUDIO_TYPES.get(audio.content_type or "", "mp3" if audio.filename.endswith(".mp3") else "wav")
        parts.append(
            {
                "type": "input_audio",
                "input_audio": {"data": base64.b64encode(await audio.read()).decode(), "format": fmt},
            }
        )
    messages: list[dict[str, Any]] = []
    system = str(data.get("system") or "").strip()
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": parts})
    return {
        "model": str(data.get("model") or "auto"),
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": _number(data, "max_tokens", int, 64),
        "temperature": _number(data, "temperature", float, 0.0),
    }


def _number(data: dict[str, Any], name: str, kind: type[int] | type[float], default: float) -> Any:
    raw = str(data.get(name) or "").strip()
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError as exc:
        raise InvalidRequest(f"{name} must be a number", param=name) from exc
