"""Checks every chat-completion response the tests receive against OpenAI's schemas, as the bytes pass by.

A transport wraps the real one and tees the body of each `.../chat/completions` response through a checker:
a JSON body must be a completion (2xx) or an error (otherwise); an event stream must be chunks, or an error
event, then `data: [DONE]`. Streams still stream: each event is checked when its bytes arrive, and the body is
never held back. What does not conform goes into `VIOLATIONS`, which a hook in tests/conftest.py empties after
each test and fails the test on, so a test fails even if it expected, say, an `openai.APIError`.

The openai SDK is built on httpx2 and the tests' raw calls on httpx: both have the same transport interface, so
each gets a transport class of its own from one definition.
"""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import httpx2
from openai import DefaultHttpxClient, OpenAI

from tests import openai_schema
from tests.openai_schema import CHUNK, COMPLETION, ERROR

CHAT_PATH = "/chat/completions"
_SHOWN_BODY_CHARS = 600


class ViolationLog:
    """Thread-safe list of what did not conform (test_replicas sends from a thread pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[str] = []

    def add(self, text: str) -> None:
        with self._lock:
            self._items.append(text)

    def drain(self) -> list[str]:
        with self._lock:
            items, self._items = self._items, []
        return items


VIOLATIONS = ViolationLog()


class ResponseCheck:
    """Checks one chat-completion response body fed to it in pieces; `finish` once the whole body has arrived."""

    def __init__(self, where: str, status: int, headers: Any, sink: ViolationLog) -> None:
        self.where = f"{where} -> {status}"
        self.status = status
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        self._sink = sink
        self._reported: set[str] = set()
        encoding = headers.get("content-encoding", "identity").lower()
        self._inflate = zlib.decompressobj(zlib.MAX_WBITS | 32) if encoding in ("gzip", "deflate") else None
        self._buffer = b""
        self._data: list[str] = []  # data lines of the event being read
        self._events = 0
        self._done = False
        self._kind: str | None = None  # "json" or "stream" once the body can be checked
        if encoding not in ("identity", "gzip", "deflate"):
            self._report(f"content-encoding {encoding!r}: the body cannot be checked", None)
        elif content_type == "application/json":
            self._kind = "json"
        elif content_type == "text/event-stream":
            self._kind = "stream"
            if status != 200:
                self._report(f"an event stream with status {status}: OpenAI streams only with 200", None)
        else:
            self._report(f"content-type {content_type!r}: OpenAI answers with JSON or an event stream", None)

    def _report(self, problem: str, body: Any, *, label: str = "") -> None:
        if problem in self._reported:  # one example per problem per response: a stream repeats itself
            return
        self._reported.add(problem)
        shown = "" if body is None else f"\n    body: {json.dumps(body)[:_SHOWN_BODY_CHARS]}"
        self._sink.add(f"{self.where}: {label}{problem}{shown}")

    def _check(self, body: Any, schema: str, label: str) -> None:
        for problem in openai_schema.violations(body, schema):
            self._report(f"not a valid {schema}: {problem}", body, label=f"{label} is ")

    def feed(self, raw: bytes) -> None:
        data = self._inflate.decompress(raw) if self._inflate else raw
        if self._kind == "stream":
            self._feed_stream(data)
        elif self._kind == "json":
            self._buffer += data

    def finish(self) -> None:
        if self._kind == "json":
            self._check_json(self._buffer)
        elif self._kind == "stream":
            if self._buffer or self._data:
                self._report("the stream ended inside an event (no blank line after its data)", None)
            elif not self._done:
                self._report("the stream ended without `data: [DONE]`", None)

    def _check_json(self, raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except ValueError as exc:
            self._report(f"the body is not JSON ({exc}): {raw[:_SHOWN_BODY_CHARS]!r}", None)
            return
        if self.status < 400:
            self._check(body, COMPLETION, "the body")
        else:
            self._check(body, ERROR, "the error body")

    def _feed_stream(self, data: bytes) -> None:
        """Server-sent events: `field: value` lines, an event per blank line; only `data` matters here."""
        *lines, self._buffer = (self._buffer + data).split(b"\n")
        for raw_line in lines:
            line = raw_line.decode("utf-8").removesuffix("\r")
            if not line:
                if self._data:
                    self._event("\n".join(self._data))
                    self._data = []
            elif line.startswith("data:"):
                self._data.append(line[5:].removeprefix(" "))

    def _event(self, data: str) -> None:
        self._events += 1
        label = f"event {self._events}"
        if self._done:
            self._report("came after `data: [DONE]`", data, label=f"{label} ")
        if data == "[DONE]":
            self._done = True
            return
        try:
            body = json.loads(data)
        except ValueError:
            self._report("is not JSON", data, label=f"{label} ")
            return
        if isinstance(body, dict) and "error" in body:  # how the openai SDK tells an error event from a chunk
            self._check(body, ERROR, f"{label} (an error)")
        else:
            self._check(body, CHUNK, label)


class _Tee:
    """Yields the inner stream's bytes unchanged, feeding them to a check on the way."""

    def __init__(self, inner: Any, check: ResponseCheck) -> None:
        self._inner = inner
        self._check = check

    def _guarded(self, step: Any, *args: Any) -> None:
        try:
            step(*args)
        except Exception as exc:  # a bug in the checker must not look like a network error to the client
            self._check._report(f"the conformance check failed: {exc!r}", None)

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._guarded(self._check.feed, chunk)
            yield chunk
        self._guarded(self._check.finish)

    def close(self) -> None:
        self._inner.close()


class _HttpxTee(_Tee, httpx.SyncByteStream):
    pass


class _Httpx2Tee(_Tee, httpx2.SyncByteStream):
    pass


class _CheckingTransport:
    _tee: type[_Tee]

    def __init__(self, inner: Any, sink: ViolationLog = VIOLATIONS) -> None:
        self._inner = inner
        self._sink = sink

    def handle_request(self, request: Any) -> Any:
        response = self._inner.handle_request(request)
        if request.url.path.endswith(CHAT_PATH):
            check = ResponseCheck(f"{request.method} {request.url}", response.status_code, response.headers, self._sink)
            response.stream = self._tee(response.stream, check)
        return response

    def close(self) -> None:
        self._inner.close()


class CheckingTransport(_CheckingTransport, httpx.BaseTransport):
    """For httpx clients: `httpx.Client(transport=CheckingTransport(httpx.HTTPTransport()))`."""

    _tee = _HttpxTee


class CheckingTransport2(_CheckingTransport, httpx2.BaseTransport):
    """The same for httpx2, which the openai SDK uses."""

    _tee = _Httpx2Tee


def openai_client(base_url: str, api_key: str, **kwargs: Any) -> OpenAI:
    """The official SDK, no retries, every chat-completion response checked."""
    kwargs.setdefault("max_retries", 0)
    http_client = DefaultHttpxClient(transport=CheckingTransport2(httpx2.HTTPTransport()))
    return OpenAI(base_url=base_url, api_key=api_key, http_client=http_client, **kwargs)


def http_client(**kwargs: Any) -> httpx.Client:
    """An `httpx.Client` whose chat-completion responses are checked."""
    return httpx.Client(transport=CheckingTransport(httpx.HTTPTransport()), **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    """`httpx.post`, with a chat-completion response checked."""
    with http_client() as client:
        return client.post(url, **kwargs)


@contextmanager
def stream(method: str, url: str, **kwargs: Any) -> Iterator[httpx.Response]:
    """`httpx.stream`, with a chat-completion response checked as it streams."""
    with http_client() as client, client.stream(method, url, **kwargs) as response:
        yield response
