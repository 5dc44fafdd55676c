"""Errors raised by the serving pipeline, free of HTTP: the API maps them to statuses."""

from __future__ import annotations


class ServingError(Exception):
    """A request the pipeline refuses. `unavailable` marks a transient server-side refusal (503)."""

    unavailable = False
    retry_after_s = 0.0

    def __init__(self, message: str, *, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param


class MediaError(ServingError):
    """Bad media: corrupt encoding, undecodable bytes, bombs, unsupported formats, refused URLs."""


class RequestShapeError(ServingError):
    """The messages cannot be turned into a prompt: unknown part types, empty content, too many items."""


class EngineUnavailable(ServingError):
    """The engine is dead or shutting down."""

    unavailable = True

    def __init__(self, message: str, *, retry_after_s: float = 10.0) -> None:
        super().__init__(message, code="engine_unavailable")
        self.retry_after_s = retry_after_s
