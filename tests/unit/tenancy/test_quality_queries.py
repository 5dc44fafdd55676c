"""Regeneration rates, grounding slices and thumbs, queried from real migrated databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import Session

from db.models import InferenceRequest
from tenancy.metering import (
    UNCLASSIFIED,
    grounding_by_mix,
    grounding_slices,
    receipt,
    record_feedback,
    regeneration_by_mix,
)
from tests.dbs import migrated

T0 = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
HOUR = (T0, T0 + timedelta(hours=1))


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path, monkeypatch):
    monkeypatch.setenv("PGTZ", "America/New_York")  # the window is measured in UTC instants, whatever the zone
    yield from migrated(request.param, tmp_path)


def _row(request_id: str, tenant: str | None, at: datetime, **fields) -> InferenceRequest:
    return InferenceRequest(
        request_id=request_id,
        tenant_id=tenant,
        model_variant="small",
        modality_mask=fields.pop("mask", 1),
        status="completed",
        created_at=at,
        **fields,
    )


def _add(db, *rows: InferenceRequest) -> None:
    with Session(db) as s:
        s.add_all(rows)
        s.commit()


def _minutes(m: float) -> datetime:
    return T0 + timedelta(minutes=m)


def test_regeneration_counts_the_same_ask_again_within_five_minutes_per_tenant_and_mix(db):
    _add(
        db,
        _row("a1", "a", _minutes(-2), prompt_fingerprint="X"),  # before the range: an earlier ask, not a row
        _row("a2", "a", _minutes(1), prompt_fingerprint="X"),  # 3 min after a1: a regeneration
        _row("b1", "b", _minutes(5), prompt_fingerprint="X"),  # another tenant's equal prompt is no repeat of a's
        _row("a3", "a", _minutes(7), prompt_fingerprint="X"),  # 6 min after a2 (b1 does not count): new
        _row("a4", "a", _minutes(11.99), prompt_fingerprint="X"),  # 4 min 59 s after a3: a regeneration
        _row("a5", "a", _minutes(1), prompt_fingerprint="Y", mask=3),
        _row("a6", "a", _minutes(6), prompt_fingerprint="Y", mask=3),  # exactly 5 min later: still within
        _row("a7", "a", _minutes(2)),  # no fingerprint: not counted at all
        _row("a9", "a", _minutes(20), prompt_fingerprint="W", mask=5),  # sent twice at the same instant:
        _row("a10", "a", _minutes(20), prompt_fingerprint="W", mask=5),  # one of them is the repeat
        _row("a11", "a", _minutes(61), prompt_fingerprint="W", mask=5),  # after the range
        _row("op", None, _minutes(3), prompt_fingerprint="X"),  # the operator's own request: no tenant
        _row("a12", "a", _minutes(30), prompt_fingerprint="V", mask=7),
        _row("a13", "a", _minutes(35.01), prompt_fingerprint="V", mask=7),  # 5 min 0.6 s later: too late
    )
    rows = regeneration_by_mix(db, *HOUR, tenant_id="a")
    assert [(r["modalities"], r["requests"], r["regenerated"]) for r in rows] == [
        ("text", 3, 2),
        ("text+image", 2, 1),
        ("text+audio", 2, 1),
        ("text+image+audio", 2, 0),
    ]
    assert rows[0]["rate"] == pytest.approx(2 / 3)
    everyone = regeneration_by_mix(db, *HOUR)
    assert next((r["modalities"], r["requests"], r["regenerated"]) for r in everyone) == ("text", 4, 2)
    assert [
        (r["modalities"], r["requests"], r["regenerated"]) for r in regeneration_by_mix(db, *HOUR, tenant_id="b")
    ] == [("text", 1, 0)]
    # A later start makes a2 and a3 earlier asks only: a4 is still a repeat of a3.
    later = regeneration_by_mix(db, _minutes(8), _minutes(60), tenant_id="a")
    assert next((r["modalities"], r["requests"], r["regenerated"]) for r in later) == ("text", 1, 1)
    assert regeneration_by_mix(db, *HOUR, tenant_id="nobody") == []


def test_grounding_slices_by_mix_and_question_kind_with_passed_share_and_thumbs(db):
    _add(
        db,
        _row("g1", "a", _minutes(1), mask=3, grounding_score=0.9, grounding_passed=True, question_kind="count"),
        _row("g2", "a", _minutes(2), mask=3, grounding_score=0.3, grounding_passed=False, question_kind="count"),
        _row("g3", "a", _minutes(3), mask=3, grounding_score=0.6, question_kind="colour_of", feedback=-1),
        _row("g4", "b", _minutes(4), mask=5, grounding_score=0.2, grounding_passed=False, question_kind="who"),
        _row("g5", "b", _minutes(5), mask=1, feedback=1),  # rated, not scored
        _row("g6", "b", _minutes(6), mask=1),  # neither: in no slice
        _row("g7", None, _minutes(7), mask=5, grounding_score=0.0, grounding_passed=False),  # no tenant
        _row("g8", "a", _minutes(90), mask=3, grounding_score=1.0, grounding_passed=True),  # after the range
        _row("g9", "a", _minutes(8), mask=5, grounding_score=0.8, grounding_passed=True, feedback=1),
    )
    by_mix = grounding_slices(db, *HOUR, by="mix")
    shown = [
        (r["slice"], r["requests"], r["scored"], r["judged"], r["passed"], r["thumbs_up"], r["thumbs_down"])
        for r in by_mix
    ]
    assert shown == [
        ("text", 1, 0, 0, 0, 1, 0),
        ("text+image", 3, 3, 2, 1, 0, 1),
        ("text+audio", 2, 2, 2, 1, 1, 0),
    ]
    assert by_mix[0]["mean"] is None
    assert by_mix[0]["passed_share"] is None
    assert by_mix[1]["mean"] == pytest.approx(0.6)
    assert by_mix[1]["passed_share"] == pytest.approx(0.5)
    assert by_mix[1]["below"] == 1
    by_kind = {r["slice"]: r for r in grounding_slices(db, *HOUR, by="kind")}
    assert set(by_kind) == {"count", "colour_of", "who", UNCLASSIFIED}
    assert (by_kind["count"]["scored"], by_kind["count"]["passed_share"]) == (2, 0.5)
    assert (by_kind["colour_of"]["judged"], by_kind["colour_of"]["thumbs_down"]) == (0, 1)
    assert (by_kind[UNCLASSIFIED]["requests"], by_kind[UNCLASSIFIED]["thumbs_up"]) == (2, 2)  # g5 and g9
    only_b = grounding_slices(db, *HOUR, by="kind", tenant_id="b")
    assert [(r["slice"], r["requests"]) for r in only_b] == [("who", 1), (UNCLASSIFIED, 1)]
    with pytest.raises(ValueError, match="by must be one of"):
        grounding_slices(db, *HOUR, by="model")
    # The tenant usage page's table: one tenant's scored rows, with the passed share beside the low count.
    mine = grounding_by_mix(db, "a", *HOUR, low=0.5)
    assert [(r["modalities"], r["scored"], r["below"], r["judged"], r["passed"]) for r in mine] == [
        ("text+image", 3, 1, 2, 1),
        ("text+audio", 1, 0, 1, 1),
    ]


def test_feedback_is_stored_on_the_tenants_own_request_and_can_be_changed(db):
    _add(db, _row("mine", "a", T0, grounding_score=0.4), _row("theirs", "b", T0))
    assert receipt(db, "a", "mine")["feedback"] is None
    assert record_feedback(db, "a", "mine", 1) is True
    assert receipt(db, "a", "mine")["feedback"] == 1
    assert record_feedback(db, "a", "mine", -1) is True  # pressing the other thumb changes it
    assert record_feedback(db, "a", "mine", -1) is True  # and pressing it again keeps it
    found = receipt(db, "a", "mine")
    assert (found["feedback"], found["grounding_score"]) == (-1, 0.4)
    assert record_feedback(db, "a", "theirs", 1) is False
    assert record_feedback(db, "a", "missing", 1) is False
    assert record_feedback(db, None, "theirs", 1) is False
    assert receipt(db, "b", "theirs")["feedback"] is None
    with pytest.raises(ValueError):
        record_feedback(db, "a", "mine", 0)
