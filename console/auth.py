"""Who is signed in to the console: a tenant (by one of its API keys) or an admin.

The session cookie holds one sign-in id per kind; the server keeps what each id signed in and when
(`tenancy.console_sessions`). Every request re-checks both: signing out, the sign-in's lifetime running out,
revoking the key, suspending the tenant or rotating the admin key each end the session at once, on every
gateway, however the cookie was copied.
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Request
from litestar.di import NamedDependency
from litestar.exceptions import NotAuthorizedException

from api.auth import STATIC_ADMIN, Authenticator
from tenancy.console_sessions import ConsoleSessions
from tenancy.directory import Directory, Principal

TENANT_SESSION = "tenant"
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


def _remember(request: Request[Any, Any, Any], key: str, value: str | None) -> None:
    """Set or drop one entry of the session, keeping the other (a browser may hold both sign-ins). Entries of
    any other name, such as those of an older cookie format, are dropped."""
    session = {k: v for k, v in _session(request).items() if k in (TENANT_SESSION, ADMIN_SESSION) and k != key}
    if value is not None:
        session[key] = value
    if session:
        request.set_session(session)
    else:
        request.clear_session()


def _session_id(request: Request[Any, Any, Any], kind: str) -> str | None:
    value = _session(request).get(kind)
    return value if isinstance(value, str) and value else None


async def sign_in(request: Request[Any, Any, Any], sessions: ConsoleSessions, kind: str, subject: str) -> None:
    """Start a new sign-in of `kind` in this browser, ending the one it held before (never reusing an id)."""
    if (previous := _session_id(request, kind)) is not None:
        await asyncio.to_thread(sessions.close, previous)
    _remember(request, kind, await asyncio.to_thread(sessions.open, kind, subject))


async def sign_out(request: Request[Any, Any, Any], sessions: ConsoleSessions, kind: str) -> None:
    if (session_id := _session_id(request, kind)) is not None:
        await asyncio.to_thread(sessions.close, session_id)
    _remember(request, kind, None)


async def _subject(request: Request[Any, Any, Any], sessions: ConsoleSessions, kind: str) -> str | None:
    session_id = _session_id(request, kind)
    return await asyncio.to_thread(sessions.subject, kind, session_id) if session_id else None


async def tenant_principal(
    request: Request[Any, Any, Any],
    directory: NamedDependency[Directory],
    console_sessions: NamedDependency[ConsoleSessions],
) -> Principal:
    key_id = await _subject(request, console_sessions, TENANT_SESSION)
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


async def admin_principal(
    request: Request[Any, Any, Any],
    directory: NamedDependency[Directory],
    auth: NamedDependency[Authenticator],
    console_sessions: NamedDependency[ConsoleSessions],
) -> Principal:
    marker = await _subject(request, console_sessions, ADMIN_SESSION) or ""
    kind, _, value = marker.partition(":")
    if kind == "static" and value and value == auth.static_admin_fingerprint:
        return STATIC_ADMIN
    if kind == "key" and value:
        found = await asyncio.to_thread(directory.by_key_id, value)
        if found is not None and found.is_admin:
            return found
    raise SignInRequired(ADMIN_SIGNIN)
