"""Traces are off without an OTLP endpoint, and go to it over gRPC or HTTP/protobuf as OTEL_EXPORTER_OTLP_PROTOCOL
says (to a receiver of the tests' own); span names of API routes carry no ids; the server span's `traceparent`
reaches a replica."""

from __future__ import annotations

import pytest
from opentelemetry import trace

from api.tracing import route_name
from serving.tracing import Tracing, headers_for
from tests.otlp import OtlpReceiver


@pytest.fixture
def receiver():
    found = OtlpReceiver().start()
    yield found
    found.stop()


def test_no_endpoint_no_traces(monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert Tracing.from_env(install=False) is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert Tracing.from_env(install=False) is None


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_spans_reach_the_endpoint_over_either_protocol(monkeypatch, receiver, protocol):
    port = receiver.grpc_port if protocol == "grpc" else receiver.http_port
    path = "" if protocol == "grpc" else "/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{port}{path}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "tessera-test")
    tracing = Tracing.from_env(install=False)
    assert tracing is not None
    assert tracing.protocol == protocol
    tracer = tracing.provider.get_tracer("test")
    with tracer.start_as_current_span("outer") as outer, tracer.start_as_current_span("inner"):
        pass
    tracing.shutdown()  # flushes
    trace_id = f"{outer.get_span_context().trace_id:032x}"
    spans = receiver.trace(trace_id, wait_for={"outer", "inner"}, timeout_s=10)
    by_name = {s.name: s for s in spans}
    assert set(by_name) == {"outer", "inner"}
    assert by_name["inner"].parent_id == by_name["outer"].span_id
    assert by_name["outer"].service == "tessera-test"


def test_an_unknown_protocol_is_refused(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="grpc or http/protobuf"):
        Tracing.from_env(install=False)


def test_route_names_carry_no_ids():
    assert route_name("POST", "/v1/chat/completions") == "POST /v1/chat/completions"
    assert route_name("GET", "/v1/responses/resp_0123456789abcdef0123") == "GET /v1/responses/{id}"
    assert route_name("GET", "/v1/usage/chatcmpl-4f1c2a9e8b7d6c5a4f3e") == "GET /v1/usage/{id}"
    assert route_name("POST", "/v1/batches/batch_abcdef0123456789/cancel") == "POST /v1/batches/{id}/cancel"


def test_a_span_becomes_a_traceparent():
    from opentelemetry.sdk.trace import TracerProvider

    span = TracerProvider().get_tracer("t").start_span("engine")
    headers = headers_for(span)
    context = span.get_span_context()
    assert headers["traceparent"].startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")
    assert headers_for(trace.INVALID_SPAN) == {}
