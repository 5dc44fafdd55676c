"""How long a response waits for its grounding verdict (`grounding_verdict_wait_s`)."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from config.settings import Settings
from grounding.service import GroundingService


def _service(wait_s: float) -> GroundingService:
    # the scorer, database and tasks are not reached by a verdict that is only waited for
    return GroundingService(None, None, None, registry=CollectorRegistry(), verdict_wait_s=wait_s)  # type: ignore[arg-type]


def test_a_verdict_not_ready_within_the_wait_answers_none():
    service = _service(0.05)

    async def wait() -> tuple[object, float]:
        started = time.monotonic()
        return await service.verdict("req-late"), time.monotonic() - started

    verdict, waited = asyncio.run(wait())
    assert verdict is None
    assert 0.04 <= waited < 5.0


def test_a_verdict_resolved_within_the_wait_is_returned():
    service = _service(5.0)
    sentinel = object()

    async def wait() -> object:
        waiting = asyncio.ensure_future(service.verdict("req-on-time"))
        await asyncio.sleep(0.05)
        service._resolve("req-on-time", sentinel)  # type: ignore[arg-type]
        return await waiting

    assert asyncio.run(wait()) is sentinel


def test_the_wait_is_a_setting_with_bounds(monkeypatch):
    assert Settings().grounding_verdict_wait_s == 20.0
    monkeypatch.setenv("TESSERA_GROUNDING_VERDICT_WAIT_S", "90")
    assert Settings().grounding_verdict_wait_s == 90.0
    monkeypatch.setenv("TESSERA_GROUNDING_VERDICT_WAIT_S", "0")
    with pytest.raises(ValidationError, match="grounding_verdict_wait_s"):
        Settings()
