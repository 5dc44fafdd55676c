"""Writes usage rows; blocking, so the API calls it from a worker thread."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session, SQLModel

from db.models import InferenceRequest


def record_usage(engine: Engine, row: InferenceRequest, outbox: Sequence[SQLModel] = ()) -> None:
    """The usage row and its billing outbox rows, in one transaction: both or neither."""
    with Session(engine, expire_on_commit=False) as s:
        s.add(row)
        s.add_all(outbox)
        s.commit()


def set_grounding_score(
    engine: Engine,
    request_id: str,
    score: float | None,
    unsupported: Sequence[str] | None = None,
    *,
    passed: bool | None = None,
    question_kind: str | None = None,
    checked: Sequence[dict[str, Any]] | None = None,
) -> bool:
    """Store the grounding score of a request whose usage row exists (the claims its media did not support, the
    verdict against the tenant's threshold, the kind of question); False when there is no such row."""
    with Session(engine) as s:
        row = s.get(InferenceRequest, request_id)
        if row is None:
            return False
        row.grounding_score = score
        row.grounding_unsupported = list(unsupported) if unsupported is not None else None
        row.grounding_passed = passed
        row.question_kind = question_kind
        row.grounding_checked = list(checked) if checked is not None else None
        s.add(row)
        s.commit()
        return True
