"""Authentication: bearer API keys resolve to a tenant principal; admin keys are separate."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from typing import Any

from litestar.connection import ASGIConnection

from serving.errors import AuthenticationFailed, PermissionDenied
from tenancy.directory import Directory, Principal


def bearer_token(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    header = connection.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


STATIC_ADMIN = Principal("admin", None, None, True, None, None)


class Authenticator:
    def __init__(self, directory: Directory, admin_key: str | None) -> None:
        self._directory = directory
        self._admin_key = admin_key.encode() if admin_key else None

    @property
    def static_admin_fingerprint(self) -> str | None:
        """Names the configured admin key without revealing it; a console session holding an old
        fingerprint stops working when the key is rotated."""
        return None if self._admin_key is None else hashlib.sha256(b"tessera-admin:" + self._admin_key).hexdigest()[:24]

    def is_static_admin(self, token: str) -> bool:
        return self._admin_key is not None and hmac.compare_digest(token.encode(), self._admin_key)

    async def principal(self, connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
        token = bearer_token(connection)
        if token is None:
            raise AuthenticationFailed("missing API key: send `Authorization: Bearer <key>`")
        if self.is_static_admin(token):
            return STATIC_ADMIN
        hit, found = self._directory.cached(token)
        if not hit:
            found = await asyncio.to_thread(self._directory.resolve, token)
        if found is None:
            raise AuthenticationFailed("incorrect, revoked or expired API key")
        return found

    async def admin(self, connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
        found = await self.principal(connection)
        if not found.is_admin:
            raise PermissionDenied("this endpoint needs an admin key")
        return found
