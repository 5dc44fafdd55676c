"""Usage records and their aggregates: receipts for one tenant, sums by modality, model or day."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, func
from sqlmodel import Session, col, select

from db.models import InferenceRequest

GROUPS = ("modality", "model", "day")


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
        key = (
            col(InferenceRequest.model_variant)
            if group_by == "model"
            else func.substr(func.cast(col(InferenceRequest.created_at), type_=_text()), 1, 10)
        )
        rows: list[Any] = list(s.exec(select(key, func.count(), *sums).where(*where).group_by(key).order_by(key)))
    return [
        {
            group_by: k,
            "requests": int(n),
            "text_tokens": int(t),
            "image_tokens": int(i),
            "audio_tokens": int(a),
            "output_tokens": int(o),
            "cost_micros": int(c),
        }
        for k, n, t, i, a, o, c in rows
    ]


def _text() -> Any:
    from sqlalchemy import String

    return String()


def spent_this_month(db: Engine, tenant_id: str) -> tuple[int, int]:
    """(tokens, cost in micros) the tenant has used since the start of this month (UTC)."""
    now = datetime.now(UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    tokens = (
        InferenceRequest.text_tokens
        + InferenceRequest.vision_tokens
        + InferenceRequest.audio_tokens
        + InferenceRequest.output_tokens
    )
    with Session(db) as s:
        row: Any = s.exec(
            select(func.coalesce(func.sum(tokens), 0), func.coalesce(func.sum(InferenceRequest.cost_micros), 0)).where(
                col(InferenceRequest.tenant_id) == tenant_id, col(InferenceRequest.created_at) >= start
            )
        ).one()
    return int(row[0]), int(row[1])
