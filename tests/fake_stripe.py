"""A local Stripe-compatible HTTP server for tests: meters, customers and meter events.

It deduplicates meter-event identifiers as Stripe does, records what it accepted, and can fail on demand.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlparse


def _nested(form: list[tuple[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in form:
        if "[" in key:
            outer, inner = key.split("[", 1)
            out.setdefault(outer, {})[inner.rstrip("]").split("][")[0]] = value
        else:
            out[key] = value
    return out


class FakeStripe:
    def __init__(self) -> None:
        self.meters: list[dict[str, Any]] = []
        self.customers: list[dict[str, Any]] = []
        self.events: dict[str, dict[str, Any]] = {}  # identifier -> event
        self.failing = False
        self.requests = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.send_header("request-id", f"req_{uuid.uuid4().hex[:12]}")
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                fake.requests += 1
                if fake.failing:
                    self._reply(500, {"error": {"type": "api_error", "message": "Stripe is down"}})
                elif urlparse(self.path).path == "/v1/billing/meters":
                    self._reply(
                        200, {"object": "list", "data": fake.meters, "has_more": False, "url": "/v1/billing/meters"}
                    )
                else:
                    self._reply(404, {"error": {"type": "invalid_request_error", "message": "no such route"}})

            def do_POST(self) -> None:
                fake.requests += 1
                length = int(self.headers.get("content-length", 0))
                form = _nested(parse_qsl(self.rfile.read(length).decode()))
                if fake.failing:
                    self._reply(500, {"error": {"type": "api_error", "message": "Stripe is down"}})
                    return
                status, body = fake.handle(urlparse(self.path).path, form)
                self._reply(status, body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

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
            if path == "/v1/billing/meter_events":
                identifier = form.get("identifier") or uuid.uuid4().hex
                if identifier in self.events:
                    return 400, {
                        "error": {
                            "type": "invalid_request_error",
                            "code": "resource_already_exists",
                            "message": f"An event with identifier {identifier} already exists.",
                        }
                    }
                event = {"object": "billing.meter_event", **form, "identifier": identifier}
                self.events[identifier] = event
                return 200, event
        return 404, {"error": {"type": "invalid_request_error", "message": f"no such route {path}"}}

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
