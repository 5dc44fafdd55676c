"""The one error hierarchy of Tessera's domain: each error carries a kind, never an HTTP status.

Every package below the HTTP surface (serving, tenancy, the console's forms) raises these. The API maps a
kind to a status and OpenAI's error shape in exactly one place, `api.errors`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar


class ErrorKind(StrEnum):
    INVALID_REQUEST = "invalid_request"
    AUTHENTICATION = "authentication"
    PERMISSION = "permission"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    TOO_LARGE = "too_large"
    RATE_LIMITED = "rate_limited"
    QUOTA_EXCEEDED = "quota_exceeded"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"


class TesseraError(Exception):
    """A refusal or failure the client should hear about: a kind, a message, a stable code and the
    offending parameter. `retry_after_s` says when a transient refusal is worth retrying; `limits` carries
    the caller's rate-limit counters (header name to value), which the API passes on."""

    kind: ClassVar[ErrorKind] = ErrorKind.INVALID_REQUEST
    default_code: ClassVar[str] = "invalid_request"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        retry_after_s: float | None = None,
        limits: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.param = param
        self.retry_after_s = retry_after_s
        self.limits = dict(limits or {})


class InvalidRequest(TesseraError):
    """The request is well-formed but cannot be served as asked."""


class AuthenticationFailed(TesseraError):
    kind = ErrorKind.AUTHENTICATION
    default_code = "invalid_api_key"


class PermissionDenied(TesseraError):
    kind = ErrorKind.PERMISSION
    default_code = "permission_denied"


class NotFound(TesseraError):
    kind = ErrorKind.NOT_FOUND
    default_code = "not_found"


class Conflict(TesseraError):
    kind = ErrorKind.CONFLICT
    default_code = "conflict"


class PayloadTooLarge(TesseraError):
    kind = ErrorKind.TOO_LARGE
    default_code = "payload_too_large"


class RateLimited(TesseraError):
    kind = ErrorKind.RATE_LIMITED
    default_code = "rate_limit_exceeded"


class QuotaExceeded(TesseraError):
    kind = ErrorKind.QUOTA_EXCEEDED
    default_code = "insufficient_quota"


class Unavailable(TesseraError):
    """Transient: the server cannot take the request now (engine down, overload, encoder failure)."""

    kind = ErrorKind.UNAVAILABLE
    default_code = "service_unavailable"

    def __init__(self, message: str, *, code: str | None = None, retry_after_s: float = 5.0) -> None:
        super().__init__(message, code=code, retry_after_s=retry_after_s)


class InternalFailure(TesseraError):
    kind = ErrorKind.INTERNAL
    default_code = "internal_error"


class MediaError(InvalidRequest):
    """Bad media: corrupt encoding, undecodable bytes, bombs, unsupported formats, refused URLs."""


class RequestShapeError(InvalidRequest):
    """The messages cannot be turned into a prompt: unknown part types, empty content, too many items."""


class EngineUnavailable(Unavailable):
    """The engine is dead or shutting down."""

    def __init__(self, message: str, *, retry_after_s: float = 10.0) -> None:
        super().__init__(message, code="engine_unavailable", retry_after_s=retry_after_s)
