"""Traces: OpenTelemetry, configured by the standard `OTEL_*` variables and off unless an OTLP endpoint is set.

With `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set, each API request is one trace:
the gateway's server span (`tessera.http`, which continues a client's `traceparent`) holds spans for routing and
the caller's checks, the quota reservation, the admission wait, each medium's decoding and encoding (with
`tessera.cache_hit`), the engine call (its first token as an event), the grounding guardrail and the usage write.
A remote replica gets the engine span's `traceparent`, so the `llm_request` span vLLM emits when started with
`--otlp-traces-endpoint` joins the same trace. `OTEL_EXPORTER_OTLP_PROTOCOL` (or `..._TRACES_PROTOCOL`) picks
`grpc` (the default, as vLLM's) or `http/protobuf`; `OTEL_SERVICE_NAME` names the service (`tessera`). Without an
endpoint the OpenTelemetry API's no-op tracer is used, and a span costs next to nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, Status, StatusCode

logger = logging.getLogger(__name__)

tracer = trace.get_tracer("tessera")
TRACE_HEADER = "x-tessera-trace-id"


def _env(name: str) -> str | None:
    value = os.environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or os.environ.get(f"OTEL_EXPORTER_OTLP_{name}")
    return value.strip() if value and value.strip() else None


class Tracing:
    """The process's tracer provider while traces are on; `shutdown` flushes what is still queued."""

    def __init__(self, provider: Any, protocol: str, endpoint: str) -> None:
        self._provider = provider
        self.protocol = protocol
        self.endpoint = endpoint

    @classmethod
    def from_env(cls, *, install: bool = True) -> Tracing | None:
        """Traces per the OTEL_* variables, or None when no endpoint is set; `install` makes its provider the
        process's (what `tracer` here uses)."""
        endpoint = _env("ENDPOINT")
        if endpoint is None or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
            return None
        protocol = (_env("PROTOCOL") or "grpc").lower()
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        exporter: Any
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

            exporter = GrpcExporter()  # reads the endpoint, headers, TLS and timeout from OTEL_* itself
        elif protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

            exporter = HttpExporter()
        else:
            raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL must be grpc or http/protobuf, not {protocol!r}")
        name = os.environ.get("OTEL_SERVICE_NAME") or "tessera"
        provider = TracerProvider(resource=Resource.create({"service.name": name}))
        provider.add_span_processor(BatchSpanProcessor(exporter))
        if install:
            trace.set_tracer_provider(provider)
        logger.info("traces go to %s over %s as service %s", endpoint, protocol, name)
        return cls(provider, protocol, endpoint)

    @property
    def provider(self) -> Any:
        return self._provider

    def shutdown(self) -> None:
        self._provider.shutdown()


def trace_id_of(span: Span | None = None) -> str | None:
    """The 32-hex trace id of `span` (the current one by default), or None when nothing is traced."""
    context = (span or trace.get_current_span()).get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else None


def headers_for(span: Span) -> dict[str, str]:
    """The W3C `traceparent` (and `tracestate`) that continues `span` in another process."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def extract(headers: Mapping[str, str]) -> Any:
    return propagate.extract(headers)


@contextmanager
def step(name: str, **attributes: Any) -> Iterator[Span]:
    """A child span of whatever is current, for one step of the request path; an exception marks it failed."""
    with tracer.start_as_current_span(name, attributes=_clean(attributes), record_exception=False) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None}
