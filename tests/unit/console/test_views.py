"""The console's own logic, without a browser: date ranges, the stacked chart's geometry, quota forms and the
admin overview's live window."""

from datetime import date

import pytest

from console.admin import quota_fields
from console.usage import _gauge, _nice_ceiling, date_range, stacked_chart
from serving.errors import InvalidRequest
from serving.metrics import LiveWindow


def test_date_range_defaults_to_two_weeks_and_refuses_bad_ranges():
    today = date(2026, 11, 29)
    assert date_range(None, None, today) == (date(2026, 11, 16), today)
    assert date_range("2026-11-01", "2026-11-03", today) == (date(2026, 11, 1), date(2026, 11, 3))
    with pytest.raises(InvalidRequest, match="after the end"):
        date_range("2026-11-05", "2026-11-01", today)
    with pytest.raises(InvalidRequest, match="a date like"):
        date_range("yesterday", None, today)
    with pytest.raises(InvalidRequest, match="at most 366"):
        date_range("2024-01-01", "2026-01-01", today)


@pytest.mark.parametrize(("value", "top"), [(0, 1), (1, 1), (3, 5), (7, 10), (101, 200), (4_999, 5_000)])
def test_the_chart_top_is_a_round_number_at_or_above_the_tallest_bar(value, top):
    assert _nice_ceiling(value) == top


def test_stacked_chart_has_a_bar_per_day_and_stacks_segments_in_order():
    rows = [
        {"day": "2026-11-02", "text_tokens": 30, "image_tokens": 54, "audio_tokens": 0, "output_tokens": 16},
        {"day": "2026-11-04", "text_tokens": 10, "image_tokens": 0, "audio_tokens": 40, "output_tokens": 0},
    ]
    chart = stacked_chart(rows, date(2026, 11, 1), date(2026, 11, 5))
    bars = {b.day: b for b in chart["bars"]}
    assert list(bars) == ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05"]
    assert bars["2026-11-01"].segments == []
    assert chart["ceiling"] == 100
    assert chart["total"] == 150
    second = bars["2026-11-02"]
    assert second.total == 100
    assert [(s["name"], s["value"]) for s in second.segments] == [("text", 30), ("image", 54), ("output", 16)]
    # Segments sit on each other: each one's top is the next one's bottom, and the full bar spans the plot.
    bottom = chart["top"] + chart["plot_h"]
    for s in second.segments:
        assert s["y"] + s["h"] == pytest.approx(bottom, abs=0.02)
        bottom = s["y"]
    assert bottom == pytest.approx(chart["top"], abs=0.02)


def test_gauges_show_limits_and_budgets_that_are_not_set():
    tpm = _gauge("tpm", "Tokens", 1_500, 1_000, "1,500")
    assert (tpm["value"], tpm["max"], tpm["percent"]) == (1_000, 1_000, 100.0)
    assert _gauge("budget-tokens", "Tokens this month", 5, None, "5")["text"] == "5 (no limit)"
    assert _gauge("budget-cost", "Spend", 250_000, 1_000_000, "$0.25")["text"] == "$0.25 of $1.00 (25%)"


def test_quota_form_validation():
    ok = quota_fields({"tokens_per_minute": "1,000", "concurrent_requests": "4", "monthly_cost_budget": "$12.50"})
    assert ok == {
        "tokens_per_minute": 1000,
        "concurrent_requests": 4,
        "monthly_token_budget": None,
        "monthly_cost_budget_micros": 12_500_000,
    }
    for bad, message in (
        ({"tokens_per_minute": "lots", "concurrent_requests": "4"}, "whole number"),
        ({"tokens_per_minute": "10", "concurrent_requests": "0"}, "at least 1"),
        ({"tokens_per_minute": "", "concurrent_requests": "4"}, "required"),
        ({"tokens_per_minute": "10", "concurrent_requests": "4", "monthly_cost_budget": "ten"}, "amount"),
    ):
        with pytest.raises(InvalidRequest, match=message):
            quota_fields(bad)


def test_live_window_rates_and_ttft_quantiles_per_pool(monkeypatch):
    clock = [1_000.0]
    monkeypatch.setattr("serving.metrics.time.monotonic", lambda: clock[0])
    live = LiveWindow(span_s=60.0)
    for i in range(100):
        live.finished("small", (i + 1) / 1000)  # 1..100 ms
    live.finished("large", None)  # failed before its first token: counted, no TTFT
    snap = live.snapshot()
    assert snap["rps"] == pytest.approx(101 / 60)
    assert snap["pools"]["small"]["ttft_p50_ms"] == pytest.approx(51.0)
    assert snap["pools"]["small"]["ttft_p99_ms"] == pytest.approx(100.0)
    assert snap["pools"]["large"]["ttft_p50_ms"] is None
    clock[0] += 61  # the minute passes
    assert live.snapshot() == {"span_s": 60.0, "rps": 0.0, "pools": {}}
