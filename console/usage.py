"""Console usage: tokens per modality per day (a stacked chart drawn as SVG on the server, so it reads without
JS), cost per model, grounding and regenerations by modality mix, live quota gauges and CSV export. The admin
area shows the same view for any tenant."""

from __future__ import annotations

import asyncio
import csv
import io
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from urllib.parse import quote

from litestar import Controller, Response, get
from litestar.di import NamedDependency
from litestar.params import FromQuery
from litestar.response import Template
from sqlalchemy import Engine

from config.settings import Settings
from console.pages import money, page
from console.quality import slice_rows
from serving.errors import InvalidRequest
from tenancy.directory import Principal, TenantQuota
from tenancy.limits import RateLimiter
from tenancy.metering import aggregate, grounding_by_mix, regeneration_by_mix, spent_this_month

DEFAULT_DAYS = 14
GROUNDING_LOW = 0.5  # the usage page counts scores below this as poorly grounded
MAX_DAYS = 366
# Chart series: (label, field of the aggregate row, CSS class that colours it).
SERIES = (
    ("text", "text_tokens", "s-text"),
    ("image", "image_tokens", "s-image"),
    ("audio", "audio_tokens", "s-audio"),
    ("output", "output_tokens", "s-output"),
)
CSV_FIELDS = ("day", "model", "requests", "text_tokens", "image_tokens", "audio_tokens", "output_tokens", "cost")


def date_range(start: str | None, end: str | None, today: date | None = None) -> tuple[date, date]:
    """The inclusive UTC day range a usage view covers; by default the last two weeks."""
    today = today or datetime.now(UTC).date()

    def parse(value: str | None, param: str, default: date) -> date:
        if not value:
            return default
        try:
            return date.fromisoformat(value)
        except ValueError as exc:
            raise InvalidRequest(f"'{param}' must be a date like 2026-01-31", param=param) from exc

    last = parse(end, "end", today)
    first = parse(start, "start", last - timedelta(days=DEFAULT_DAYS - 1))
    if first > last:
        raise InvalidRequest("the start date is after the end date", param="start")
    if (last - first).days >= MAX_DAYS:
        raise InvalidRequest(f"a usage view covers at most {MAX_DAYS} days", param="start")
    return first, last


def day_bounds(first: date, last: date) -> tuple[datetime, datetime]:
    """The instants [since, until) that UTC days first to last cover."""
    return datetime.combine(first, time.min, UTC), datetime.combine(last + timedelta(days=1), time.min, UTC)


def _nice_ceiling(value: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten at or above value (the chart's top gridline)."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if step * m >= value:
                return step * m
        step *= 10


@dataclass(frozen=True)
class Bar:
    day: str
    label: str | None  # shown under the bar; None where labels would crowd
    x: float
    segments: list[dict[str, Any]]
    total: int


def stacked_chart(rows: list[dict[str, Any]], first: date, last: date) -> dict[str, Any]:
    """Geometry of the stacked daily chart: every day in the range gets a bar, empty days included."""
    by_day = {r["day"]: r for r in rows}
    days = [first + timedelta(days=i) for i in range((last - first).days + 1)]
    width, height, left, bottom, top = 720.0, 240.0, 56.0, 28.0, 12.0
    plot_w, plot_h = width - left - 8, height - bottom - top
    totals = [sum(int(by_day.get(d.isoformat(), {}).get(f, 0)) for _, f, _ in SERIES) for d in days]
    ceiling = _nice_ceiling(max([*totals, 1]))
    slot = plot_w / len(days)
    every = max(1, round(len(days) / 8))
    bars = []
    for i, (d, total) in enumerate(zip(days, totals, strict=True)):
        row = by_day.get(d.isoformat(), {})
        y = top + plot_h
        segments = []
        for name, field, css in SERIES:
            value = int(row.get(field, 0))
            h = plot_h * value / ceiling
            y -= h
            if value:
                segments.append({"name": name, "css": css, "value": value, "y": round(y, 2), "h": round(h, 2)})
        bars.append(
            Bar(d.isoformat(), d.strftime("%b %d") if i % every == 0 else None, left + i * slot, segments, total)
        )
    return {
        "width": width,
        "height": height,
        "left": left,
        "top": top,
        "plot_h": plot_h,
        "bar_w": round(slot * 0.7, 2),
        "slot": slot,
        "ceiling": ceiling,
        "grid": [{"value": ceiling * k // 4, "y": round(top + plot_h * (1 - k / 4), 2)} for k in range(5)],
        "bars": bars,
        "series": [(name, css) for name, _, css in SERIES],
        "total": sum(totals),
    }


def usage_view(db: Engine, tenant_id: str, first: date, last: date) -> dict[str, Any]:
    since, until = day_bounds(first, last)
    days = aggregate(db, tenant_id, since, until, "day")
    models = aggregate(db, tenant_id, since, until, "model")
    grounding = grounding_by_mix(db, tenant_id, since, until, low=GROUNDING_LOW)
    regeneration = regeneration_by_mix(db, since, until, tenant_id=tenant_id)
    return {
        "start": first.isoformat(),
        "end": last.isoformat(),
        "chart": stacked_chart(days, first, last),
        "days": days,
        "models": [{**m, "cost": money(m["cost_micros"])} for m in models],
        "grounding": slice_rows(grounding, regeneration),
        "grounding_low": GROUNDING_LOW,
        "requests": sum(m["requests"] for m in models),
        "cost": money(sum(m["cost_micros"] for m in models)),
    }


def usage_csv(db: Engine, tenant_id: str, first: date, last: date) -> str:
    since, until = day_bounds(first, last)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_FIELDS)
    for r in aggregate(db, tenant_id, since, until, "day_model"):
        cost = f"{r['cost_micros'] / 1_000_000:.6f}"
        writer.writerow([*(r[f] for f in CSV_FIELDS[:-1]), cost])
    return out.getvalue()


def csv_response(body: str, tenant: str, first: date, last: date) -> Response[str]:
    name = f"tessera-usage-{tenant}-{first.isoformat()}-{last.isoformat()}.csv"
    ascii_name = re.sub(r"[^A-Za-z0-9._-]+", "-", name)
    disposition = f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name, safe='')}"
    return Response(
        body,
        media_type="text/csv; charset=utf-8",
        headers={"content-disposition": disposition, "cache-control": "no-store"},
    )


async def gauges(
    limiter: RateLimiter, db: Engine, tenant_id: str, quota: TenantQuota | None, window_s: float
) -> list[dict[str, Any]]:
    """The tenant's quota gauges as they stand now: this window's tokens, requests in flight, this month."""
    tokens_now, in_flight = await limiter.usage(tenant_id)
    month_tokens, month_cost = await asyncio.to_thread(spent_this_month, db, tenant_id)
    quota = quota or TenantQuota(tenant_id=tenant_id)
    window = "minute" if window_s == 60 else f"{window_s:g} s"
    return [
        _gauge("tpm", f"Tokens this {window}", tokens_now, quota.tokens_per_minute, f"{tokens_now:,}"),
        _gauge("concurrency", "Requests in flight", in_flight, quota.concurrent_requests, f"{in_flight}"),
        _gauge("budget-tokens", "Tokens this month", month_tokens, quota.monthly_token_budget, f"{month_tokens:,}"),
        _gauge("budget-cost", "Spend this month", month_cost, quota.monthly_cost_budget_micros, money(month_cost)),
    ]


def _gauge(key: str, label: str, value: int, limit: int | None, shown: str) -> dict[str, Any]:
    if limit is None:
        return {"key": key, "label": label, "value": value, "max": None, "text": f"{shown} (no limit)"}
    limit_shown = money(limit, places=2) if key == "budget-cost" else f"{limit:,}"
    percent = 100.0 if limit == 0 else min(100.0, 100.0 * value / limit)
    return {
        "key": key,
        "label": label,
        "value": min(value, limit),
        "max": limit,
        "percent": round(percent, 1),
        "text": f"{shown} of {limit_shown} ({percent:.0f}%)",
    }


class UsageController(Controller):
    path = "/console/usage"

    @get("/")
    async def usage_page(
        self,
        signed_in: NamedDependency[Principal],
        db: NamedDependency[Engine],
        limiter: NamedDependency[RateLimiter],
        settings: NamedDependency[Settings],
        start: FromQuery[str | None] = None,
        end: FromQuery[str | None] = None,
    ) -> Template:
        first, last = date_range(start, end)
        tenant_id = str(signed_in.tenant_id)
        view = await asyncio.to_thread(usage_view, db, tenant_id, first, last)
        found = await gauges(limiter, db, tenant_id, signed_in.quota, settings.rate_window_s)
        return page(
            "console/usage.html.jinja2",
            area="tenant",
            active="usage",
            tenant=signed_in.tenant_name,
            view=view,
            gauges=found,
            base="/console/usage",
        )

    @get("/gauges")
    async def gauges_partial(
        self,
        signed_in: NamedDependency[Principal],
        db: NamedDependency[Engine],
        limiter: NamedDependency[RateLimiter],
        settings: NamedDependency[Settings],
    ) -> Template:
        found = await gauges(limiter, db, str(signed_in.tenant_id), signed_in.quota, settings.rate_window_s)
        return page("console/_gauges.html.jinja2", area="tenant", gauges=found, base="/console/usage")

    @get("/export.csv")
    async def export(
        self,
        signed_in: NamedDependency[Principal],
        db: NamedDependency[Engine],
        start: FromQuery[str | None] = None,
        end: FromQuery[str | None] = None,
    ) -> Response[str]:
        first, last = date_range(start, end)
        body = await asyncio.to_thread(usage_csv, db, str(signed_in.tenant_id), first, last)
        return csv_response(body, str(signed_in.tenant_name), first, last)
