"""A small OTLP trace receiver for the tests (no collector installs here): gRPC (`TraceService/Export`) and HTTP
(`POST /v1/traces`, protobuf) on 127.0.0.1, keeping every span it receives."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    service: str
    attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[str, ...] = ()


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        self._grpc: Any = None
        self._http: ThreadingHTTPServer | None = None
        self.grpc_port = 0
        self.http_port = 0

    def take(self, request: Any) -> None:
        found = []
        for resource in request.resource_spans:
            attrs = {a.key: _value(a.value) for a in resource.resource.attributes}
            service = str(attrs.get("service.name", ""))
            for scope in resource.scope_spans:
                for s in scope.spans:
                    found.append(
                        ReceivedSpan(
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            name=s.name,
                            service=service,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            events=tuple(e.name for e in s.events),
                        )
                    )
        with self._lock:
            self.spans.extend(found)

    def start(self) -> OtlpReceiver:
        receiver = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                receiver.take(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self._grpc)
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._grpc.start()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.take(request)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                return None

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http_port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._grpc is not None:
            self._grpc.stop(grace=1)
        if self._http is not None:
            self._http.shutdown()

    def trace(self, trace_id: str, *, wait_for: set[str] = frozenset(), timeout_s: float = 30.0) -> list[ReceivedSpan]:
        """The spans of `trace_id`, once every name in `wait_for` is among them (bounded by `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                spans = [s for s in self.spans if s.trace_id == trace_id]
            if wait_for <= {s.name for s in spans} or time.monotonic() > deadline:
                return spans
            time.sleep(0.2)
