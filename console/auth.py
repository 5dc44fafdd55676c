"""Who is signed in to the console: a tenant (by one of its API keys) or an admin, kept in the signed session.

The session cookie holds only a key id (tenant) or an admin marker; every request re-checks it against the
directory, so revoking the key, suspending the tenant or rotating the admin key ends the session at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Request
from litestar.exceptions import NotAuthorizedException

from api.auth import STATIC_ADMIN, Authenticator
from tenancy.directory import Directory, Principal

TENANT_SESSION = "key_id"
ADMIN_SESSION = "admin"
ADMIN_SIGNIN = "/console/admin/signin"
TENANT_SIGNIN = "/console/signin"


class SignInRequired(NotAuthorizedException):
    """Raised by the console dependencies; the console's error handler turns it into a redirect."""

    def __init__(self, signin: str) -> None:
        super().__init__("sign in first")
        self.signin = signin


def _session(request: Request[Any, Any, Any]) -> dict[str, Any]:
    return request.session if isinstance(request.session, dict) else {}


def remember(request: Request[Any, Any, Any], key: str, value: str | None) -> None:
    """Set or drop one entry of the session, keeping the other (a browser may hold both sign-ins)."""
    session = {k: v for k, v in _session(request).items() if k != key}
    if value is not None:
        session[key] = value
    if session:
        request.set_session(session)
    else:
        request.clear_session()


async def tenant_principal(request: Request[Any, Any, Any], directory: Directory) -> Principal:
    key_id = _session(request).get(TENANT_SESSION)
    found = await asyncio.to_thread(directory.by_key_id, key_id) if key_id else None
    if found is None or found.tenant_id is None:
        raise SignInRequired(TENANT_SIGNIN)
    return found


def admin_marker(auth: Authenticator, directory: Directory, key: str) -> str | None:
    """What the session stores for an admin sign-in with `key`, or None when it is not an admin key."""
    if auth.is_static_admin(key):
        return "static:" + (auth.static_admin_fingerprint or "")
    found = directory.resolve(key)
    return f"key:{found.key_id}" if found is not None and found.is_admin else None


async def admin_principal(request: Request[Any, Any, Any], directory: Directory, auth: Authenticator) -> Principal:
    marker = str(_session(request).get(ADMIN_SESSION) or "")
    kind, _, value = marker.partition(":")
    if kind == "static" and value and value == auth.static_admin_fingerprint:
        return STATIC_ADMIN
    if kind == "key" and value:
        found = await asyncio.to_thread(directory.by_key_id, value)
        if found is not None and found.is_admin:
            return found
    raise SignInRequired(ADMIN_SIGNIN)
