"""A clock tests move by hand, for code that takes one (`clock=`) instead of reading the time."""

from __future__ import annotations

from datetime import UTC, datetime


class Clock:
    def __init__(self, start: datetime = datetime(2026, 12, 1, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now
