"""The server span of each API request (`/v1/...`): it continues the client's `traceparent` when one is sent, is
the current span while the request is handled (so serving's spans nest under it), and names the trace in the
`x-tessera-trace-id` response header. Nothing is added while traces are off (serving.tracing)."""

from __future__ import annotations

import re
from typing import Any

from opentelemetry import context, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from serving.tracing import TRACE_HEADER, extract, trace_id_of, tracer

_ID = re.compile(r"/(?:[a-z]+[-_])?[0-9a-f]{8,}[0-9a-f-]*(?=/|$)")  # a request, response, file or batch id


def route_name(method: str, path: str) -> str:
    """A span name without ids in it: `GET /v1/responses/{id}`."""
    return f"{method} {_ID.sub('/{id}', path)}"


def trace_requests(app: Any) -> Any:
    async def middleware(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        span = tracer.start_span(
            route_name(scope["method"], scope["path"]),
            context=extract(headers),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": scope["method"], "url.path": scope["path"]},
        )
        token = context.attach(trace.set_span_in_context(span))
        trace_id = trace_id_of(span) if span.is_recording() else None

        async def send_traced(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                span.set_attribute("http.response.status_code", message["status"])
                if message["status"] >= 500:
                    span.set_status(Status(StatusCode.ERROR))
                if trace_id is not None:
                    message = {
                        **message,
                        "headers": [*message.get("headers", []), (TRACE_HEADER.encode(), trace_id.encode())],
                    }
            await send(message)

        try:
            await app(scope, receive, send_traced)
        except BaseException as exc:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            context.detach(token)
            span.end()

    return middleware
