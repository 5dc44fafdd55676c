"""Console sign-ins kept on the server: a session cookie is good only while its row exists and is young enough.

The cookie carries a random id per sign-in; the database keeps a hash of it, what it signs in (a tenant key's
id or an admin marker) and when. Signing out deletes the row, so a copied cookie stops working on every gateway
that shares the database; a sign-in older than the lifetime is refused, however often it is used.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, delete
from sqlmodel import Session, col

from db.models import ConsoleSession

KINDS = ("tenant", "admin")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class ConsoleSessions:
    def __init__(self, db: Engine, lifetime_s: float, clock: Callable[[], datetime] | None = None) -> None:
        self._db = db
        self._lifetime = timedelta(seconds=lifetime_s)
        self._clock = clock

    def _now(self) -> datetime:
        return (self._clock or _utcnow)()

    def open(self, kind: str, subject: str) -> str:
        """Record a new sign-in and return its id for the cookie. Expired sign-ins are swept out on the way."""
        if kind not in KINDS:
            raise ValueError(f"unknown console session kind {kind!r}")
        session_id = secrets.token_urlsafe(32)
        now = self._now()
        with Session(self._db) as s:
            s.execute(delete(ConsoleSession).where(col(ConsoleSession.issued_at) < now - self._lifetime))
            s.add(ConsoleSession(id_hash=_digest(session_id), kind=kind, subject=subject, issued_at=now))
            s.commit()
        return session_id

    def subject(self, kind: str, session_id: str) -> str | None:
        """What the sign-in `session_id` signed in, or None when it was signed out, expired or is of another kind."""
        with Session(self._db) as s:
            row = s.get(ConsoleSession, _digest(session_id))
        if row is None or row.kind != kind:
            return None
        issued = row.issued_at if row.issued_at.tzinfo else row.issued_at.replace(tzinfo=UTC)
        if self._now() >= issued + self._lifetime:
            return None
        return row.subject

    def close(self, session_id: str) -> None:
        with Session(self._db) as s:
            s.execute(delete(ConsoleSession).where(col(ConsoleSession.id_hash) == _digest(session_id)))
            s.commit()
