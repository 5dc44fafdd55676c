"""Authentication: bearer API keys resolve to a tenant principal; admin keys are separate."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections import OrderedDict, deque
from typing import Any

from litestar.connection import ASGIConnection

from serving.errors import AuthenticationFailed, PermissionDenied, RateLimited
from tenancy.directory import Directory, Principal


def bearer_token(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    header = connection.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


STATIC_ADMIN = Principal("admin", None, None, True, None, None)


class FailureThrottle:
    """At most `limit` failed key lookups per client address in any `window_s`; past that the address is
    refused (429) before its keys cost a lookup. Addresses are tracked in a bounded LRU."""

    def __init__(self, limit: int = 30, window_s: float = 10.0, addresses: int = 10_000) -> None:
        self.limit = limit
        self.window_s = window_s
        self._addresses = addresses
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def check(self, address: str) -> None:
        recent = self._recent(address)
        if recent is not None and len(recent) >= self.limit:
            wait = recent[0] + self.window_s - time.monotonic()
            raise RateLimited(
                "too many requests with invalid API keys from this address",
                code="too_many_failed_keys",
                retry_after_s=max(wait, 0.1),
            )

    def failed(self, address: str) -> None:
        recent = self._recent(address)
        if recent is None:
            recent = self._failures[address] = deque(maxlen=self.limit)
            while len(self._failures) > self._addresses:
                self._failures.popitem(last=False)
        recent.append(time.monotonic())
        self._failures.move_to_end(address)

    def _recent(self, address: str) -> deque[float] | None:
        recent = self._failures.get(address)
        if recent is not None:
            horizon = time.monotonic() - self.window_s
            while recent and recent[0] < horizon:
                recent.popleft()
        return recent


class Authenticator:
    def __init__(self, directory: Directory, admin_key: str | None, throttle: FailureThrottle | None = None) -> None:
        self._directory = directory
        self._admin_key = admin_key.encode() if admin_key else None
        self.throttle = throttle or FailureThrottle()

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
        address = connection.client.host if connection.client else "unknown"
        hit, found = self._directory.cached(token)
        if not hit:
            self.throttle.check(address)
            found = await asyncio.to_thread(self._directory.resolve, token)
        if found is None:
            self.throttle.failed(address)
            raise AuthenticationFailed("incorrect, revoked or expired API key")
        return found

    async def admin(self, connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
        found = await self.principal(connection)
        if not found.is_admin:
            raise PermissionDenied("this endpoint needs an admin key")
        return found


def tenant_of(principal: Principal, what: str) -> str:
    """The caller's tenant, for what only a tenant can own (stored responses, files); a key without one, such as an
    operator's admin key, is refused."""
    if principal.tenant_id is None:
        raise PermissionDenied(f"{what} belong to a tenant; this key has none", code="no_tenant")
    return principal.tenant_id
