"""The one place where errors become OpenAI's nested error shape, with their HTTP status and headers.

Domain errors (`serving.errors.TesseraError` and its kinds) carry no status; the table below gives each kind
its status and OpenAI `type`. Litestar's own exceptions (validation, 404, 413) are mapped here too, so the
API, the admin API and the console all answer with the same status for the same failure.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from litestar import Response
from litestar.exceptions import HTTPException, NotFoundException, ValidationException

from serving.errors import ErrorKind, PayloadTooLarge, TesseraError

logger = logging.getLogger(__name__)

# kind -> (HTTP status, OpenAI error type)
_STATUS: dict[ErrorKind, tuple[int, str]] = {
    ErrorKind.INVALID_REQUEST: (400, "invalid_request_error"),
    ErrorKind.AUTHENTICATION: (401, "authentication_error"),
    ErrorKind.PERMISSION: (403, "permission_error"),
    ErrorKind.NOT_FOUND: (404, "invalid_request_error"),
    ErrorKind.CONFLICT: (409, "invalid_request_error"),
    ErrorKind.TOO_LARGE: (413, "invalid_request_error"),
    ErrorKind.RATE_LIMITED: (429, "rate_limit_error"),
    ErrorKind.QUOTA_EXCEEDED: (429, "insufficient_quota"),
    ErrorKind.UNAVAILABLE: (503, "server_error"),
    ErrorKind.INTERNAL: (500, "server_error"),
}
_KIND_OF_STATUS = {401: ErrorKind.AUTHENTICATION, 403: ErrorKind.PERMISSION, 404: ErrorKind.NOT_FOUND}


@dataclass(frozen=True)
class ApiError:
    """What the client receives for one error."""

    status_code: int
    error_type: str
    message: str
    code: str
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}}


def _retry_headers(seconds: float) -> dict[str, str]:
    return {"retry-after": str(max(1, math.ceil(seconds))), "retry-after-ms": str(max(1, int(seconds * 1000)))}


def _from_domain(exc: TesseraError) -> ApiError:
    status, error_type = _STATUS[exc.kind]
    headers = dict(exc.limits)
    if exc.retry_after_s is not None:
        headers.update(_retry_headers(exc.retry_after_s))
    return ApiError(status, error_type, exc.message, exc.code, exc.param, headers)


def to_api_error(exc: BaseException) -> ApiError:
    """Map any exception raised while serving to the error the client sees."""
    if isinstance(exc, TesseraError):
        return _from_domain(exc)
    if isinstance(exc, ValidationException):
        return _from_validation(exc)
    if isinstance(exc, NotFoundException):
        return ApiError(404, "invalid_request_error", str(exc.detail), "not_found")
    if isinstance(exc, HTTPException):
        if exc.status_code == 413:
            return _from_domain(PayloadTooLarge("request body is larger than the server accepts"))
        if exc.status_code >= 500:
            logger.error("server error while handling a request: %s", exc.detail, exc_info=exc)
            return ApiError(exc.status_code, "server_error", str(exc.detail), "http_error")
        kind = _KIND_OF_STATUS.get(exc.status_code, ErrorKind.INVALID_REQUEST)
        return ApiError(exc.status_code, _STATUS[kind][1], str(exc.detail), "http_error")
    logger.exception("unhandled error while serving a request", exc_info=exc)
    return ApiError(500, "server_error", "the server failed while handling the request", "internal_error")


def _from_validation(exc: ValidationException) -> ApiError:
    extra = exc.extra if isinstance(exc.extra, list) else []
    first = extra[0] if extra and isinstance(extra[0], dict) else {}
    param = first.get("key") or None
    message = first.get("message") or str(exc.detail)
    where = f" (at {param})" if param else ""
    return ApiError(400, "invalid_request_error", f"invalid request: {message}{where}", "invalid_request", param)


def error_response(exc: BaseException) -> Response[dict[str, Any]]:
    err = to_api_error(exc)
    return Response(err.body(), status_code=err.status_code, headers=err.headers)
