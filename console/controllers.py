"""Console pages: sign-in, sign-out and the playground, which runs prompts through the API's own serving path."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.response import Redirect, Template

from api.chat.service import chat_completion
from api.errors import error_response
from config.settings import Settings
from console.auth import TENANT_SESSION, sign_in, sign_out
from console.pages import page
from serving.errors import InvalidRequest
from serving.pools import ModelPool, PoolRegistry
from serving.service import InferenceService
from tenancy.console_sessions import ConsoleSessions
from tenancy.directory import Directory, Principal
from tenancy.quotas import QuotaGate

AUDIO_TYPES = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}


def _data_url(raw: bytes, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(raw).decode()


def preferred_model(pools: list[ModelPool]) -> str:
    """The model the playground opens on: the strongest pool that takes the most media (a newcomer's image and
    clip both reach it), else `auto`."""
    if not pools:
        return "auto"
    return max(pools, key=lambda p: (len(set(p.modalities)), p.strength)).name


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
        directory: NamedDependency[Directory],
        console_sessions: NamedDependency[ConsoleSessions],
        data: Annotated[dict[str, str], Body(media_type=RequestEncodingType.URL_ENCODED)],
    ) -> Any:
        principal = await asyncio.to_thread(directory.resolve, data.get("api_key", "").strip())
        if principal is None or principal.tenant_id is None:
            return page("console/signin.html.jinja2", area="signin", error="That key is not valid.", status_code=401)
        await sign_in(request, console_sessions, TENANT_SESSION, principal.key_id)
        return Redirect("/console/playground", status_code=303)

    @post("/signout")
    async def signout(
        self, request: Request[Any, Any, Any], console_sessions: NamedDependency[ConsoleSessions]
    ) -> Redirect:
        await sign_out(request, console_sessions, TENANT_SESSION)
        return Redirect("/console/signin", status_code=303)

    @get("/playground", name="console:playground")
    async def playground(
        self,
        request: Request[Any, Any, Any],
        signed_in: NamedDependency[Principal],
        pools: NamedDependency[PoolRegistry],
    ) -> Template:
        able = [p for p in pools.pools if signed_in.may_use(p.name)]
        models = [p.name for p in able]
        tasks = {kind: [t.name for t in pools.tasks if t.kind == kind and signed_in.may_use(t.name)] for kind in
                 ("transcription", "embedding")}  # fmt: skip
        return page(
            "console/playground.html.jinja2",
            area="tenant",
            active="playground",
            tenant=signed_in.tenant_name,
            models=[*models, "auto"],
            preferred=preferred_model(able),
            speech_models=tasks["transcription"],
            embedding_models=tasks["embedding"],
            base_url=str(request.base_url).rstrip("/") + "/v1",
        )

    @post("/playground/run", status_code=200)
    async def run(
        self,
        signed_in: NamedDependency[Principal],
        service: NamedDependency[InferenceService],
        quotas: NamedDependency[QuotaGate],
        settings: NamedDependency[Settings],
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
    body: dict[str, Any] = {
        "model": str(data.get("model") or "auto"),
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": _number(data, "max_tokens", int, 64),
        "temperature": _number(data, "temperature", float, 0.0),
    }
    response_format = _response_format(data)
    if response_format is not None:
        body["response_format"] = response_format
    tools = _tools(data)
    if tools is not None:
        body["tools"] = tools
    tool_choice = _tool_choice(data, tools)
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    return body


def _number(data: dict[str, Any], name: str, kind: type[int] | type[float], default: float) -> Any:
    raw = str(data.get(name) or "").strip()
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError as exc:
        raise InvalidRequest(f"{name} must be a number", param=name) from exc


# The playground's structured-output and tool boxes. Only their JSON and shape are checked here, with the form's
# own words; everything else (names, schemas, which model can call tools) is the API's to judge, as for any caller.
FORMATS = {"text": "text", "json_object": "JSON object", "json_schema": "JSON schema"}
TOOL_CHOICES = ("auto", "required", "none")
NAMED_CHOICE = "function:"  # the tool-choice select's value for one named function, e.g. `function:get_time`
SCHEMA_NAME = "answer"  # json_schema.name, when the box holds a bare schema


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_box(data: dict[str, Any], field: str, label: str, param: str) -> Any:
    """The parsed JSON in a form box, or None when it is empty."""
    raw = str(data.get(field) or "").strip()
    if not raw:
        return None
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(
            f"{label} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", param=param
        ) from exc
    except (ValueError, RecursionError) as exc:
        raise InvalidRequest(f"{label} is not valid JSON: {exc}", param=param) from exc


def _response_format(data: dict[str, Any]) -> dict[str, Any] | None:
    """text (nothing to send), JSON object, or JSON schema with the schema box: a bare schema, or OpenAI's
    `{"name", "schema", "strict"}` as it is."""
    kind = str(data.get("response_format") or "text").strip()
    if kind not in FORMATS:
        raise InvalidRequest("Response format must be text, JSON object or JSON schema.", param="response_format")
    has_schema = bool(str(data.get("json_schema") or "").strip())
    if kind != "json_schema":
        if has_schema:
            raise InvalidRequest(
                f"There is a JSON schema in its box, but the response format is {FORMATS[kind]}: "
                "choose JSON schema, or clear the box.",
                param="response_format",
            )
        return None if kind == "text" else {"type": "json_object"}
    schema = _json_box(data, "json_schema", "The JSON schema", "response_format")
    if schema is None:
        raise InvalidRequest(
            "Response format JSON schema needs a schema in the JSON schema box.", param="response_format"
        )
    if not isinstance(schema, dict):
        raise InvalidRequest(
            'The JSON schema must be a JSON object, such as {"type": "object", "properties": {...}}.',
            param="response_format",
        )
    if isinstance(schema.get("schema"), dict) and "name" in schema:
        return {"type": "json_schema", "json_schema": schema}  # already OpenAI's json_schema object
    return {"type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": True}}


def _tools(data: dict[str, Any]) -> list[dict[str, Any]] | None:
    """OpenAI's function tools from the tools box: a list (or one) of `{"type": "function", "function": {...}}`
    or of bare `{"name", "description", "parameters"}` functions, which are wrapped. An empty list is none."""
    parsed = _json_box(data, "tools", "Tools", "tools")
    if parsed is None:
        return None
    if isinstance(parsed, dict):
        parsed = [parsed]
    if not isinstance(parsed, list):
        raise InvalidRequest("Tools must be a JSON list of functions.", param="tools")
    tools = [_tool(item, i) for i, item in enumerate(parsed)]
    return tools or None


def _tool(item: Any, i: int) -> dict[str, Any]:
    shape = 'either {"name": ..., "description": ..., "parameters": {...}} or {"type": "function", "function": {...}}'
    if not isinstance(item, dict):
        raise InvalidRequest(f"Tool {i + 1} must be a JSON object: {shape}.", param="tools")
    kind = item.get("type", "function")
    if kind != "function":
        raise InvalidRequest(f"Tool {i + 1} is a {kind!r} tool; only function tools are supported.", param="tools")
    if "function" in item:
        function = item["function"]
        tool = {**item, "type": "function"}
    else:
        function = {k: v for k, v in item.items() if k != "type"}
        tool = {"type": "function", "function": function}
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"].strip():
        raise InvalidRequest(f"Tool {i + 1} needs a function name: {shape}.", param="tools")
    return tool


def _tool_choice(data: dict[str, Any], tools: list[dict[str, Any]] | None) -> str | dict[str, Any] | None:
    """auto, required, none, or one of the tools by name (`function:NAME`, or the bare name). Without tools
    there is nothing to choose: auto and none are dropped, anything else is refused."""
    raw = str(data.get("tool_choice") or "").strip()
    if not tools:
        if raw in ("", "auto", "none"):
            return None
        wanted = raw.removeprefix(NAMED_CHOICE)
        raise InvalidRequest(f"Tool choice {wanted!r} needs tools: add them in the Tools box.", param="tool_choice")
    if not raw:
        return None
    if raw in TOOL_CHOICES:
        return raw
    name = raw.removeprefix(NAMED_CHOICE).strip()
    names = [str(t["function"]["name"]) for t in tools]
    if name not in names:
        raise InvalidRequest(
            f"Tool choice names {name!r}, which is not one of the tools ({', '.join(names)}).", param="tool_choice"
        )
    return {"type": "function", "function": {"name": name}}
