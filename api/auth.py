"""Bearer-key guard for the API; keys are compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from api.errors import AuthenticationError


def bearer_token(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    header = connection.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def api_key_guard(expected: str):  # type: ignore[no-untyped-def]
    expected_bytes = expected.encode()

    def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        token = bearer_token(connection)
        if token is None:
            raise AuthenticationError("missing API key: send `Authorization: Bearer <key>`")
        if not hmac.compare_digest(token.encode(), expected_bytes):
            raise AuthenticationError("incorrect API key provided")

    return guard


def key_salt(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    """Prefix-cache salt of the caller: requests under different keys never share KV blocks."""
    token = bearer_token(connection)
    return hashlib.sha256(f"tessera-kv:{token}".encode()).hexdigest()[:32] if token else None
