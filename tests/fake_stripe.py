"""A local Stripe-compatible HTTP server for tests: meters, customers and meter events.

It behaves as Stripe's v1 API does where the outbox depends on it:
- meter events are deduplicated by `identifier` and refused (400) past the 35-day window;
- POSTs honour `Idempotency-Key`: once execution began, the answer is saved under the key, 500s included, and
  replayed to a retry with the same parameters; a key in flight answers 409; other parameters answer 400;
- faults on demand: `500` (before execution, not saved), `500_saved` (after execution began: saved under the key,
  nothing recorded), `timeout` (stalls past the client's timeout, nothing recorded), `lost` (recorded, then the
  answer stalls, so the client sees a timeout), and permanent refusals of chosen identifiers.

It counts what reached it, so tests can tell a retry from a duplicate: `executions` per identifier (meter-event
requests that got past the idempotency layer), `late_arrivals` (meter-event requests for an identifier Stripe had
already recorded), `replays` (answers served from the idempotency store), `conflicts` (409s for a key in flight).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlparse

METER_EVENTS = "/v1/billing/meter_events"
WINDOW_S = 35 * 24 * 3600
FAULTS = ("500", "500_saved", "timeout", "lost")


def _nested(form: list[tuple[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in form:
        if "[" in key:
            outer, inner = key.split("[", 1)
            out.setdefault(outer, {})[inner.rstrip("]").split("][")[0]] = value
        else:
            out[key] = value
    return out


def _error(kind: str, message: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, **({"code": code} if code else {})}}


class FakeStripe:
    def __init__(self, *, stall_s: float = 1.0, latency_s: float = 0.0) -> None:
        self.meters: list[dict[str, Any]] = []
        self.customers: list[dict[str, Any]] = []
        self.events: dict[str, dict[str, Any]] = {}  # identifier -> event
        self.failing = False  # every request answers 500 (not saved)
        self.faults: Callable[[str], str | None] | None = None  # path -> one of FAULTS, or None to serve it
        self.refused: dict[str, tuple[int, str]] = {}  # identifier -> (status, code) answered for good
        self.stall_s = stall_s
        self.latency_s = latency_s  # added to every answer, as the network to Stripe would
        self.requests = 0
        self.executions: Counter[str] = Counter()
        self.late_arrivals: Counter[str] = Counter()
        self.replays = 0
        self.conflicts: Counter[str] = Counter()  # path -> 409s for a key already in flight
        self.keys_by_identifier: defaultdict[str, list[str]] = defaultdict(list)
        self._saved: dict[str, tuple[str, dict[str, Any], int, dict[str, Any]]] = {}  # key -> path, form, answer
        self._in_flight: set[str] = set()
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: dict[str, Any], replayed: bool = False) -> None:
                raw = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(raw)))
                    self.send_header("request-id", f"req_{uuid.uuid4().hex[:12]}")
                    if replayed:
                        self.send_header("idempotent-replayed", "true")
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (a timeout fault)

            def do_GET(self) -> None:
                with fake._lock:
                    fake.requests += 1
                fault = fake._fault(urlparse(self.path).path)
                if fault == "timeout":
                    time.sleep(fake.stall_s)
                if fault is not None:
                    self._reply(500, _error("api_error", "Stripe is down"))
                elif urlparse(self.path).path == "/v1/billing/meters":
                    with fake._lock:
                        data = list(fake.meters)
                    self._reply(200, {"object": "list", "data": data, "has_more": False, "url": "/v1/billing/meters"})
                else:
                    self._reply(404, _error("invalid_request_error", "no such route"))

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                form = _nested(parse_qsl(self.rfile.read(length).decode()))
                path = urlparse(self.path).path
                status, body, replayed, stall = fake._post(path, form, self.headers.get("idempotency-key"))
                time.sleep(fake.stall_s if stall else fake.latency_s)
                self._reply(status, body, replayed)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def _fault(self, path: str) -> str | None:
        if self.failing:
            return "500"
        with self._lock:
            return self.faults(path) if self.faults is not None else None

    def _post(self, path: str, form: dict[str, Any], key: str | None) -> tuple[int, dict[str, Any], bool, bool]:
        """(status, body, replayed, stall before answering)."""
        with self._lock:
            self.requests += 1
            identifier = form.get("identifier") if path == METER_EVENTS else None
            if identifier is not None:
                self.keys_by_identifier[identifier].append(key or "")
                if identifier in self.events:
                    self.late_arrivals[identifier] += 1
        fault = self._fault(path)
        if fault in {"500", "timeout"}:
            return 500, _error("api_error", "Stripe is down"), False, fault == "timeout"
        with self._lock:
            if key is not None:
                if key in self._in_flight:
                    self.conflicts[path] += 1
                    busy = _error("idempotency_error", "Key in use by another request", "idempotency_key_in_use")
                    return 409, busy, False, False
                if key in self._saved:
                    saved_path, saved_form, status, body = self._saved[key]
                    if (saved_path, saved_form) != (path, form):
                        message = "Keys for idempotent requests can only be used with the same parameters"
                        return 400, _error("idempotency_error", message), False, False
                    self.replays += 1
                    return status, body, True, False
                self._in_flight.add(key)
        try:
            if fault == "500_saved":
                status, body = 500, _error("api_error", "An error occurred while processing the request")
            else:
                status, body = self.handle(path, form)
        finally:
            with self._lock:
                if key is not None:
                    self._in_flight.discard(key)
                    self._saved[key] = (path, form, status, body)
        return status, body, False, fault == "lost"

    def handle(self, path: str, form: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if path == "/v1/billing/meters":
                meter = {"id": f"mtr_{uuid.uuid4().hex[:14]}", "object": "billing.meter", **form}
                self.meters.append(meter)
                return 200, meter
            if path == "/v1/customers":
                customer = {"id": f"cus_{uuid.uuid4().hex[:14]}", "object": "customer", **form}
                self.customers.append(customer)
                return 200, customer
            if path == METER_EVENTS:
                return self._meter_event(form)
        return 404, _error("invalid_request_error", f"no such route {path}")

    def _meter_event(self, form: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        identifier = form.get("identifier") or uuid.uuid4().hex
        self.executions[identifier] += 1
        if identifier in self.refused:
            status, code = self.refused[identifier]
            return status, _error("invalid_request_error", f"meter event {identifier} is invalid", code)
        if identifier in self.events:
            message = f"An event with identifier {identifier} already exists."
            return 400, _error("invalid_request_error", message, "resource_already_exists")
        if time.time() - int(form.get("timestamp", time.time())) > WINDOW_S:
            message = "Timestamp must be within the past 35 calendar days."
            return 400, _error("invalid_request_error", message, "timestamp_too_far_in_past")
        if form.get("event_name") not in {m.get("event_name") for m in self.meters}:
            return 400, _error("invalid_request_error", "No active meter for this event_name", "resource_missing")
        event = {"object": "billing.meter_event", **form, "identifier": identifier}
        self.events[identifier] = event
        return 200, event

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for event in self.events.values():
            out[event["event_name"]] += int(event["payload"]["value"])
        return dict(out)

    def __enter__(self) -> FakeStripe:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
