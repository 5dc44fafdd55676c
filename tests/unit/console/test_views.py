"""The console's own logic, without a browser: date ranges, the stacked chart's geometry, quota and guardrail forms,
the admin overview's live window, quality slices and the eval report's headline."""

from datetime import date

import pytest

from console.admin import quota_fields
from console.forms import threshold_step
from console.quality import eval_headline, eval_report_html, slice_rows
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


def test_quota_form_guardrail_fields():
    base = {"tokens_per_minute": "10", "concurrent_requests": "1"}
    fields = quota_fields({**base, "grounding_policy": "flag", "grounding_threshold": "0.35"})
    assert (fields["grounding_policy"], fields["grounding_threshold"]) == ("flag", 0.35)
    assert "grounding_policy" not in quota_fields(base)  # a form without them leaves the guardrail as it was
    for bad, message in (
        ({"grounding_policy": "loud"}, "one of off, score, flag, block"),
        ({"grounding_threshold": ""}, "from 0 to 1"),
        ({"grounding_threshold": "-0.1"}, "from 0 to 1"),
        ({"grounding_threshold": "inf"}, "from 0 to 1"),
        ({"grounding_threshold": "half"}, "from 0 to 1"),
    ):
        with pytest.raises(InvalidRequest, match=message):
            quota_fields({**base, **bad})
    # The box steps by 0.05, but a threshold set off that grid through the API must still submit unchanged.
    assert [threshold_step(t) for t in (0.0, 0.5, 0.65, 0.9, 1.0, 0.33)] == ["0.05"] * 5 + ["any"]


def test_quota_form_stored_response_fields():
    base = {"tokens_per_minute": "10", "concurrent_requests": "1"}
    fields = quota_fields({**base, "store_responses": "off", "response_retention_days": "7"})
    assert (fields["store_responses"], fields["response_retention_days"]) == (False, 7)
    assert quota_fields({**base, "store_responses": "on"})["store_responses"] is True
    assert "store_responses" not in quota_fields(base)  # a form without them leaves storage as it was
    for bad, message in (
        ({"store_responses": "maybe"}, "on or off"),
        ({"response_retention_days": "0"}, "at least 1"),
        ({"response_retention_days": "5000"}, "at most 3,650"),
        ({"response_retention_days": "a week"}, "whole number"),
    ):
        with pytest.raises(InvalidRequest, match=message):
            quota_fields({**base, **bad})


def test_slice_rows_join_grounding_and_regeneration_by_mix():
    grounding = [{"modalities": "text+audio", "scored": 2, "mean": 0.5, "below": 1, "judged": 2, "passed": 1}]
    regeneration = [
        {"modalities": "text+audio", "requests": 4, "regenerated": 1, "rate": 0.25},
        {"modalities": "text", "requests": 3, "regenerated": 0, "rate": 0.0},
    ]
    rows = slice_rows(grounding, regeneration)
    assert [r["modalities"] for r in rows] == ["text", "text+audio"]
    assert (rows[0]["scored"], rows[0]["mean"], rows[0]["judged"], rows[0]["regeneration"]["requests"]) == (
        0,
        None,
        0,
        3,
    )
    assert (rows[1]["passed"], rows[1]["regeneration"]["regenerated"]) == (1, 1)
    assert slice_rows(grounding, [])[0]["regeneration"] is None


def test_eval_headline_reads_the_report_and_survives_a_bad_one(tmp_path):
    json_path, html_path = tmp_path / "g.json", tmp_path / "g.html"
    assert eval_headline(json_path, html_path) is None
    json_path.write_text(
        '{"started_at": "2026-12-04T08:00:00Z", "gate": {"model": "large", "passed": true, "failures": []},'
        ' "models": {"large": {"summary": {"overall": {"items": 3, "accuracy": 1.0, "hallucination_rate": null,'
        ' "guardrail": {"precision": 0.5, "recall": "high"}}, "by_mix": {"audio": {"items": 3, "accuracy": 0.5}}}}}}'
    )
    headline = eval_headline(json_path, html_path)
    assert (headline["error"], headline["gate_passed"], headline["has_html"]) == (None, True, False)
    [model] = headline["models"]
    overall = model["overall"]
    assert (overall["items"], overall["accuracy"], overall["hallucination_rate"]) == (3, 1.0, None)
    assert (overall["guardrail_precision"], overall["guardrail_recall"]) == (0.5, None)  # not a number: not shown
    assert [(s["slice"], s["accuracy"]) for s in model["slices"]] == [("overall", 1.0), ("audio", 0.5)]
    for broken in ("[1, 2]", "{", '{"models": 3}'):
        json_path.write_text(broken)
        assert "could not be read" in eval_headline(json_path, html_path)["error"]
    html_path.write_text("<p>report</p>")
    assert eval_report_html(html_path) == "<p>report</p>"
    assert eval_report_html(tmp_path / "none.html") is None
