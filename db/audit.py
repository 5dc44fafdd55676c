"""The audit log: every admin change (tenants, quotas and guardrail policies, keys, prices) as one row written in
the same transaction as the change, so a change is never on record without its row, nor the row without it.

It sits here, below every package that changes what admins change, so that `tenancy` and `billing` each write
their own rows without importing each other."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from db.models import AuditEntry

SYSTEM = "system"  # a change the server made itself (the embedded default's demo tenant and key)


def _plain(values: dict[str, Any] | None) -> dict[str, Any] | None:
    """JSON-safe values (datetimes as ISO text)."""
    if values is None:
        return None
    return json.loads(json.dumps(values, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v)))


def write_audit(
    session: Session,
    actor: str,
    action: str,
    target: str,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> None:
    """Adds the change's row to `session`: it commits, or rolls back, with the change itself."""
    session.add(
        AuditEntry(actor=actor[:128], action=action, target=target[:160], before=_plain(before), after=_plain(after))
    )


def changed(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Only the fields whose value changed, before and after."""
    keys = [k for k in after if before.get(k) != after.get(k)]
    return {k: before.get(k) for k in keys}, {k: after[k] for k in keys}


@dataclass(frozen=True)
class AuditPage:
    rows: list[AuditEntry]
    next_cursor: int | None  # pass as `before` for the next (older) page; None when this is the last


def audit_page(
    db: Engine,
    *,
    actor: str | None = None,
    action: str | None = None,
    target: str | None = None,
    before: int | None = None,
    limit: int = 50,
) -> AuditPage:
    """The newest entries first, filtered by exact actor, action (or an action family: `quota` matches
    `quota.update`) and target; `before` is the cursor of the previous page (an entry id)."""
    query = select(AuditEntry).order_by(col(AuditEntry.id).desc()).limit(limit + 1)
    if actor:
        query = query.where(AuditEntry.actor == actor)
    if action:
        query = query.where(
            (col(AuditEntry.action) == action) | col(AuditEntry.action).startswith(action.rstrip(".") + ".")
        )
    if target:
        query = query.where(AuditEntry.target == target)
    if before is not None:
        query = query.where(col(AuditEntry.id) < before)
    with Session(db, expire_on_commit=False) as s:
        rows = list(s.exec(query))
    more = len(rows) > limit
    rows = rows[:limit]
    return AuditPage(rows, rows[-1].id if more and rows else None)


def entry_summary(row: AuditEntry) -> dict[str, Any]:
    return {
        "id": row.id,
        "object": "audit.entry",
        "at": row.at.isoformat(),
        "actor": row.actor,
        "action": row.action,
        "target": row.target,
        "before": row.before,
        "after": row.after,
    }
