"""The console's session cookie: encrypted, HttpOnly, SameSite=Lax, and written only when its contents change.

Litestar's cookie backend re-issues the cookie, with a fresh expiry, on every response that carries a session,
so a browser in use would stay signed in forever. This backend leaves an unchanged session's cookie alone: the
cookie then expires when its sign-in does, and the server-side record (`tenancy.console_sessions`) bounds it
regardless.
"""

from __future__ import annotations

from typing import Any

from litestar.connection import ASGIConnection
from litestar.middleware.base import DefineMiddleware
from litestar.middleware.session.base import SessionMiddleware
from litestar.middleware.session.client_side import ClientSideSessionBackend, CookieBackendConfig
from litestar.types import Empty, Message, ScopeSession

SESSION_COOKIE = "tessera_session"
_AS_LOADED = "tessera.session_as_loaded"


class SignInCookies(ClientSideSessionBackend):
    async def load_from_connection(self, connection: ASGIConnection[Any, Any, Any, Any]) -> dict[str, Any]:
        session = await super().load_from_connection(connection)
        connection.state[_AS_LOADED] = dict(session)
        return session

    async def store_in_message(
        self, scope_session: ScopeSession, message: Message, connection: ASGIConnection[Any, Any, Any, Any]
    ) -> None:
        unchanged = scope_session is not Empty and scope_session == connection.state.get(_AS_LOADED)
        if unchanged and scope_session and self.get_cookie_key_set(connection):
            return
        await super().store_in_message(scope_session, message, connection)


def session_middleware(secret: bytes, lifetime_s: float, *, secure: bool) -> DefineMiddleware:
    """The session middleware. `secure` forces the Secure flag; `console.security` adds it on https requests."""
    config = CookieBackendConfig(
        secret=secret,
        key=SESSION_COOKIE,
        httponly=True,
        samesite="lax",
        secure=secure,
        max_age=max(1, int(lifetime_s)),
    )
    return DefineMiddleware(SessionMiddleware, backend=SignInCookies(config))
