"""Every error the API can send, at any status or mid-stream, has OpenAI's error shape (`ErrorResponse`)."""

from __future__ import annotations

import pytest
from litestar.exceptions import HTTPException, NotFoundException, ValidationException

from api.errors import to_api_error
from serving import errors
from tests.openai_schema import ERROR, assert_valid

DOMAIN = [
    errors.InvalidRequest("bad", param="messages"),
    errors.AuthenticationFailed("no key"),
    errors.PermissionDenied("not yours"),
    errors.NotFound("no such model", code="model_not_found", param="model"),
    errors.Conflict("exists"),
    errors.PayloadTooLarge("too big"),
    errors.RateLimited("slow down", retry_after_s=2, limits={"x-ratelimit-limit-tokens": "10"}),
    errors.QuotaExceeded("budget spent"),
    errors.EngineUnavailable("engine died"),
    errors.InternalFailure("oops"),
]
FRAMEWORK = [
    ValidationException(detail="bad", extra=[{"key": "temperature", "message": "too high"}]),
    NotFoundException(detail="no route"),
    HTTPException(status_code=413, detail="too large"),
    HTTPException(status_code=405, detail="method not allowed"),
    HTTPException(status_code=502, detail="upstream"),
    RuntimeError("a bug"),
]


@pytest.mark.parametrize("exc", DOMAIN + FRAMEWORK, ids=lambda e: type(e).__name__)
def test_error_bodies_match_openais_schema(exc):
    err = to_api_error(exc)
    assert 400 <= err.status_code < 600
    assert_valid(err.body(), ERROR)
