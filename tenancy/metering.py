"""Usage records and their aggregates: receipts for one tenant, sums by modality, model or day."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, String, case, func
from sqlmodel import Session, col, select

from db.models import InferenceRequest

GROUPS = ("modality", "model", "day", "day_model")
STATUSES = ("completed", "cancelled", "failed")
# Modality mixes as the console offers them, by the bit mask the usage row stores (text 1, image 2, audio 4).
MIXES = {"text": 1, "text+image": 3, "text+audio": 5, "text+image+audio": 7}


def mix_name(mask: int) -> str:
    return "+".join(name for bit, name in ((1, "text"), (2, "image"), (4, "audio")) if mask & bit)


def requests_page(
    db: Engine,
    tenant_id: str | None,
    *,
    model: str | None = None,
    mix: str | None = None,
    status: str | None = None,
    grounding_below: float | None = None,
    page: int = 1,
    per_page: int = 25,
) -> tuple[list[dict[str, Any]], int, int]:
    """One page of a tenant's requests, newest first; how many match in all; and the page given, which is
    `page` brought within 1 and the last page."""
    where: list[Any] = [col(InferenceRequest.tenant_id) == tenant_id]
    if model:
        where.append(col(InferenceRequest.model_variant) == model)
    if mix:
        where.append(col(InferenceRequest.modality_mask) == MIXES[mix])
    if status:
        where.append(col(InferenceRequest.status) == status)
    if grounding_below is not None:
        where.append(col(InferenceRequest.grounding_score) < grounding_below)
    with Session(db) as s:
        total = int(s.exec(select(func.count()).select_from(InferenceRequest).where(*where)).one())
        page = min(max(1, page), max(1, -(-total // per_page)))
        rows = s.exec(
            select(InferenceRequest)
            .where(*where)
            .order_by(col(InferenceRequest.created_at).desc(), col(InferenceRequest.request_id))
            .offset((page - 1) * per_page)
            .limit(per_page)
        ).all()
        return [_receipt(r) for r in rows], total, page


def receipt(db: Engine, tenant_id: str | None, request_id: str) -> dict[str, Any] | None:
    """The usage record of one request, only to the tenant that made it."""
    with Session(db) as s:
        row = s.get(InferenceRequest, request_id)
        if row is None or row.tenant_id != tenant_id:
            return None
        return _receipt(row)


def _receipt(row: InferenceRequest) -> dict[str, Any]:
    return {
        "request_id": row.request_id,
        "object": "usage.receipt",
        "model": row.model_variant,
        "status": row.status,
        "created_at": row.created_at.isoformat(),
        "modality_mask": row.modality_mask,
        "modalities": mix_name(row.modality_mask),
        "tokens": {
            "text": row.text_tokens,
            "image": row.vision_tokens,
            "audio": row.audio_tokens,
            "cached_prefix": row.cached_tokens,
            "cached_image": row.cached_image_tokens,
            "cached_audio": row.cached_audio_tokens,
            "output": row.output_tokens,
        },
        "ttft_ms": row.ttft_ms,
        "total_latency_ms": row.total_latency_ms,
        "cost_micros": row.cost_micros,
        "grounding_score": row.grounding_score,
        "grounding_unsupported": row.grounding_unsupported,
    }


def aggregate(db: Engine, tenant_id: str | None, start: datetime, end: datetime, group_by: str) -> list[dict[str, Any]]:
    if group_by not in GROUPS:
        raise ValueError(f"group_by must be one of {', '.join(GROUPS)}")
    sums = [
        func.coalesce(func.sum(c), 0)
        for c in (
            InferenceRequest.text_tokens,
            InferenceRequest.vision_tokens,
            InferenceRequest.audio_tokens,
            InferenceRequest.output_tokens,
            InferenceRequest.cost_micros,
        )
    ]
    where = [
        col(InferenceRequest.tenant_id) == tenant_id,
        col(InferenceRequest.created_at) >= start,
        col(InferenceRequest.created_at) < end,
    ]
    with Session(db) as s:
        if group_by == "modality":
            totals: Any = s.exec(select(*sums).where(*where)).one()
            text, image, audio, output, cost = totals
            count = s.exec(select(func.count()).where(*where).select_from(InferenceRequest)).one()
            return [
                {"modality": "text", "input_tokens": int(text)},
                {"modality": "image", "input_tokens": int(image)},
                {"modality": "audio", "input_tokens": int(audio)},
                {"modality": "output", "output_tokens": int(output)},
                {"requests": int(count), "cost_micros": int(cost)},
            ]
        names = ("day", "model") if group_by == "day_model" else (group_by,)
        keys = [_DAY if name == "day" else col(InferenceRequest.model_variant) for name in names]
        columns: list[Any] = [*keys, func.count(), *sums]
        query: Any = select(*columns).where(*where).group_by(*keys).order_by(*keys)
        rows: list[Any] = list(s.exec(query))
    out = []
    for row in rows:
        n, t, i, a, o, c = row[len(names) :]
        out.append(
            {
                **dict(zip(names, row[: len(names)], strict=True)),
                "requests": int(n),
                "text_tokens": int(t),
                "image_tokens": int(i),
                "audio_tokens": int(a),
                "output_tokens": int(o),
                "cost_micros": int(c),
            }
        )
    return out


# The UTC calendar day of a usage row, as YYYY-MM-DD, in SQL both SQLite and PostgreSQL accept.
_DAY = func.substr(func.cast(col(InferenceRequest.created_at), type_=String()), 1, 10)


def _month_start() -> datetime:
    return datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


_TOKENS = (
    InferenceRequest.text_tokens
    + InferenceRequest.vision_tokens
    + InferenceRequest.audio_tokens
    + InferenceRequest.output_tokens
)


def month_by_tenant(db: Engine) -> dict[str, dict[str, int]]:
    """Requests, tokens and cost (micros) of every tenant since the start of this month (UTC)."""
    query: Any = (
        select(
            col(InferenceRequest.tenant_id),
            func.count(),
            func.coalesce(func.sum(_TOKENS), 0),
            func.coalesce(func.sum(InferenceRequest.cost_micros), 0),
        )
        .where(col(InferenceRequest.created_at) >= _month_start(), col(InferenceRequest.tenant_id).is_not(None))
        .group_by(col(InferenceRequest.tenant_id))
    )
    with Session(db) as s:
        return {t: {"requests": int(n), "tokens": int(k), "cost_micros": int(c)} for t, n, k, c in s.exec(query)}


def spent_this_month(db: Engine, tenant_id: str) -> tuple[int, int]:
    """(tokens, cost in micros) the tenant has used since the start of this month (UTC)."""
    start = _month_start()
    tokens = _TOKENS
    with Session(db) as s:
        row: Any = s.exec(
            select(func.coalesce(func.sum(tokens), 0), func.coalesce(func.sum(InferenceRequest.cost_micros), 0)).where(
                col(InferenceRequest.tenant_id) == tenant_id, col(InferenceRequest.created_at) >= start
            )
        ).one()
    return int(row[0]), int(row[1])


def grounding_by_mix(
    db: Engine, tenant_id: str | None, start: datetime, end: datetime, low: float = 0.5
) -> list[dict[str, Any]]:
    """Grounding sliced by modality mix: scored requests, their mean score and how many fell below `low`.
    An aggregate over all mixes could hide a weak encoder behind a strong one."""
    score = col(InferenceRequest.grounding_score)
    query: Any = (
        select(
            col(InferenceRequest.modality_mask),
            func.count(),
            func.avg(score),
            func.sum(case((score < low, 1), else_=0)),
        )
        .where(
            col(InferenceRequest.tenant_id) == tenant_id,
            col(InferenceRequest.created_at) >= start,
            col(InferenceRequest.created_at) < end,
            score.is_not(None),
        )
        .group_by(col(InferenceRequest.modality_mask))
        .order_by(col(InferenceRequest.modality_mask))
    )
    with Session(db) as s:
        return [
            {"modalities": mix_name(m), "scored": int(n), "mean": float(avg), "below": int(below or 0)}
            for m, n, avg, below in s.exec(query)
        ]
