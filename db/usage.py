"""Writes usage rows; blocking, so the API calls it from a worker thread."""

from __future__ import annotations

from sqlalchemy import Engine
from sqlmodel import Session

from db.models import InferenceRequest


def record_usage(engine: Engine, row: InferenceRequest) -> None:
    with Session(engine) as s:
        s.add(row)
        s.commit()
