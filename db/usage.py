"""Writes usage rows; blocking, so the API calls it from a worker thread."""

from __future__ import annotations

from collections.abc import Sequence

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
    engine: Engine, request_id: str, score: float, unsupported: Sequence[str] | None = None
) -> bool:
    """Store the grounding score of a request whose usage row exists (and the claims its media did not support);
    False when there is no such row."""
    with Session(engine) as s:
        row = s.get(InferenceRequest, request_id)
        if row is None:
            return False
        row.grounding_score = score
        row.grounding_unsupported = list(unsupported) if unsupported is not None else None
        s.add(row)
        s.commit()
        return True
