"""The one error hierarchy and its mapping onto OpenAI's nested error shape."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Response
from litestar.exceptions import HTTPException, NotFoundException, ValidationException

from serving.errors import ServingError

logger = logging.getLogger(__name__)


class APIError(Exception):
    """An error with an HTTP status and OpenAI's `type`, `code` and `param`."""

    status_code = 400
    error_type = "invalid_request_error"
    code = "invalid_request"

    def __init__(
        self, message: str, *, param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}}


class InvalidRequest(APIError):
    """400: the request is well-formed JSON but cannot be served as asked."""


class AuthenticationError(APIError):
    status_code = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class ModelNotFound(APIError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "model_not_found"


class PayloadTooLarge(APIError):
    status_code = 413
    error_type = "invalid_request_error"
    code = "payload_too_large"


class RateLimited(APIError):
    status_code = 429
    error_type = "rate_limit_error"
    code = "rate_limit_exceeded"


class QuotaExceeded(APIError):
    status_code = 429
    error_type = "insufficient_quota"
    code = "insufficient_quota"


class ServiceUnavailable(APIError):
    status_code = 503
    error_type = "server_error"
    code = "service_unavailable"

    def __init__(self, message: str, *, retry_after_s: float = 5.0, code: str | None = None) -> None:
        seconds = max(1, round(retry_after_s))
        super().__init__(
            message, code=code, headers={"retry-after": str(seconds), "retry-after-ms": str(int(retry_after_s * 1000))}
        )


class InternalError(APIError):
    status_code = 500
    error_type = "server_error"
    code = "internal_error"


def to_api_error(exc: BaseException) -> APIError:
    """Map any exception raised while serving to the error the client sees."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ServingError):
        if exc.code == "model_not_found":
            return ModelNotFound(exc.message, param=exc.param)
        if exc.unavailable:
            return ServiceUnavailable(exc.message, retry_after_s=exc.retry_after_s, code=exc.code)
        return InvalidRequest(exc.message, param=exc.param, code=exc.code)
    if isinstance(exc, ValidationException):
        return _from_validation(exc)
    if isinstance(exc, NotFoundException):
        return _status_error(404, exc.detail, "not_found")
    if isinstance(exc, HTTPException):
        if exc.status_code == 413:
            return PayloadTooLarge("request body is larger than the server accepts")
        if exc.status_code >= 500:
            logger.error("server error while handling a request: %s", exc.detail, exc_info=exc)
        return _status_error(exc.status_code, exc.detail, "http_error")
    logger.exception("unhandled error while serving a request", exc_info=exc)
    return InternalError("the server failed while handling the request")


def _status_error(status: int, detail: str, code: str) -> APIError:
    err = APIError(detail, code=code)
    err.status_code = status
    return err


def _from_validation(exc: ValidationException) -> APIError:
    extra = exc.extra if isinstance(exc.extra, list) else []
    first = extra[0] if extra and isinstance(extra[0], dict) else {}
    param = first.get("key") or None
    message = first.get("message") or str(exc.detail)
    return InvalidRequest(
        f"invalid request: {message}" + (f" (at {param})" if param else ""), param=param, code="invalid_request"
    )


def error_response(exc: BaseException) -> Response[dict[str, Any]]:
    err = to_api_error(exc)
    return Response(err.body(), status_code=err.status_code, headers=err.headers)
