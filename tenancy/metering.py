"""Usage records and their aggregates: receipts for one tenant, sums by modality, model or day, grounding and
regeneration slices, and the tenant's thumbs on an answer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, Float, String, and_, case, func, update
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
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
        found = _receipt(row)
        # The attempts that followed this one (a cascade's escalation, a guardrail's regeneration), with their costs.
        later = s.exec(
            select(InferenceRequest)
            .where(InferenceRequest.attempt_of == request_id, InferenceRequest.tenant_id == tenant_id)
            .order_by(col(InferenceRequest.created_at))
        )
        found["followed_by"] = [
            {"request_id": r.request_id, "model": r.model_variant, "cost_micros": r.cost_micros, "status": r.status}
            for r in later
        ]
        return found


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
        "priority": row.priority,  # batch: billed at the model's batch share of the prices
        "endpoint": row.endpoint,  # chat | embeddings | transcriptions | translations | grounding
        "trace_id": row.trace_id,  # the request's OpenTelemetry trace, when the server exports traces
        "audio_seconds": row.audio_ms / 1000,  # a transcription's audio, billed per second
        "cached": row.cached_audio_ms > 0 and row.cached_audio_ms >= row.audio_ms,  # from the results cache
        "grounding_score": row.grounding_score,
        "grounding_unsupported": row.grounding_unsupported,
        "grounding_checked": row.grounding_checked,  # each claim, the evidence that spoke to it, and its verdict
        "grounding_passed": row.grounding_passed,
        "question_kind": row.question_kind,
        "feedback": row.feedback,
        "route_reason": row.route_reason,  # why routing chose the model (a cascade's escalation says so)
        "attempt_of": row.attempt_of,  # a second attempt at an answer: the first attempt's request id
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
    # Second attempts at an answer (a cascade's escalations, a guardrail's regenerations), counted per group.
    sums.append(func.coalesce(func.sum(case((col(InferenceRequest.attempt_of).is_not(None), 1), else_=0)), 0))
    where = [
        col(InferenceRequest.tenant_id) == tenant_id,
        col(InferenceRequest.created_at) >= start,
        col(InferenceRequest.created_at) < end,
    ]
    with Session(db) as s:
        if group_by == "modality":
            totals: Any = s.exec(select(*sums).where(*where)).one()
            text, image, audio, output, cost, _ = totals
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
        n, t, i, a, o, c, again = row[len(names) :]
        out.append(
            {
                **dict(zip(names, row[: len(names)], strict=True)),
                "requests": int(n),
                "text_tokens": int(t),
                "image_tokens": int(i),
                "audio_tokens": int(a),
                "output_tokens": int(o),
                "cost_micros": int(c),
                "second_attempts": int(again),  # escalations and regenerations answered here
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
    """Grounding of one tenant sliced by modality mix: scored requests, their mean score, how many fell below
    `low` and how many of those judged passed the tenant's guardrail threshold. An aggregate over all mixes
    could hide a weak encoder behind a strong one."""
    where = [col(InferenceRequest.tenant_id) == tenant_id, col(InferenceRequest.grounding_score).is_not(None)]
    return _grounding_slices(db, "mix", where, start, end, low)


UNCLASSIFIED = "unclassified"  # the question kind of rows written before questions were classified
# The column each slice of the grounding tables groups by, and how a group's value is named.
_SLICES: dict[str, tuple[Any, Any]] = {
    "mix": (col(InferenceRequest.modality_mask), mix_name),
    "kind": (col(InferenceRequest.question_kind), lambda kind: kind or UNCLASSIFIED),
}
SLICES = tuple(_SLICES)


def grounding_slices(
    db: Engine, start: datetime, end: datetime, *, by: str = "mix", tenant_id: str | None = None, low: float = 0.5
) -> list[dict[str, Any]]:
    """Grounding and thumbs of every tenant (or only of `tenant_id`) sliced by modality mix or by question kind.
    A slice counts the requests that were scored or rated; rows of no tenant (the operator's own) are left out."""
    if by not in _SLICES:
        raise ValueError(f"by must be one of {', '.join(SLICES)}")
    scored, rated = col(InferenceRequest.grounding_score).is_not(None), col(InferenceRequest.feedback).is_not(None)
    return _grounding_slices(db, by, [_tenants(tenant_id), scored | rated], start, end, low)


def _tenants(tenant_id: str | None) -> Any:
    """Every tenant's rows (None), or one tenant's."""
    tenant = col(InferenceRequest.tenant_id)
    return tenant.is_not(None) if tenant_id is None else tenant == tenant_id


def _counted(condition: Any) -> Any:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


def _grounding_slices(
    db: Engine, by: str, where: list[Any], start: datetime, end: datetime, low: float
) -> list[dict[str, Any]]:
    key, name = _SLICES[by]
    score, passed = col(InferenceRequest.grounding_score), col(InferenceRequest.grounding_passed)
    thumbs = col(InferenceRequest.feedback)
    columns: list[Any] = [
        key,
        func.count(),
        func.count(score),
        func.avg(score),
        _counted(score < low),
        func.count(passed),
        _counted(passed.is_(True)),
        _counted(thumbs == 1),
        _counted(thumbs == -1),
    ]
    query: Any = (
        select(*columns)
        .where(*where, col(InferenceRequest.created_at) >= start, col(InferenceRequest.created_at) < end)
        .group_by(key)
        .order_by(key.is_(None), key)  # unclassified last on every database
    )
    with Session(db) as s:
        rows = list(s.exec(query))
    return [
        {
            "slice": name(k),
            "modalities": mix_name(k) if by == "mix" else None,
            "requests": int(n),
            "scored": int(n_scored),
            "mean": None if avg is None else float(avg),
            "below": int(below),
            "judged": int(judged),
            "passed": int(ok),
            "passed_share": int(ok) / int(judged) if judged else None,
            "thumbs_up": int(up),
            "thumbs_down": int(down),
        }
        for k, n, n_scored, avg, below, judged, ok, up, down in rows
    ]


REGENERATION_WINDOW_S = 300.0  # the same ask again within this long counts as a regeneration


class seconds_between(FunctionElement[float]):  # noqa: N801 (an SQL function, named as SQL names them)
    """`later - earlier` in seconds, in the SQL of the database at hand."""

    type = Float()
    name = "seconds_between"
    inherit_cache = True


@compiles(seconds_between, "sqlite")
def _seconds_sqlite(element: seconds_between, compiler: SQLCompiler, **kw: Any) -> str:
    # To the millisecond: julianday's doubles are off by some microseconds, enough to put exactly five minutes
    # past a five-minute window.
    later, earlier = (compiler.process(c, **kw) for c in element.clauses)
    return f"round((julianday({later}) - julianday({earlier})) * 86400.0, 3)"


@compiles(seconds_between)
def _seconds_postgresql(element: seconds_between, compiler: SQLCompiler, **kw: Any) -> str:
    # PostgreSQL's, as the default: the only database besides SQLite the project runs on.
    later, earlier = (compiler.process(c, **kw) for c in element.clauses)
    return f"EXTRACT(EPOCH FROM ({later} - {earlier}))"


def regeneration_by_mix(
    db: Engine,
    start: datetime,
    end: datetime,
    *,
    tenant_id: str | None = None,
    window_s: float = REGENERATION_WINDOW_S,
) -> list[dict[str, Any]]:
    """Per modality mix, the share of requests in [start, end) that repeat an earlier request of the same tenant
    (an equal prompt fingerprint) made at most `window_s` before them: the user asked again. Every tenant's rows,
    or only `tenant_id`'s; rows without a fingerprint are not counted.

    The request just before each one with its fingerprint is found with LAG: if that one is too old, every
    earlier one is too. Requests from up to `window_s` before `start` count as earlier requests, not as rows."""
    fingerprint, at = col(InferenceRequest.prompt_fingerprint), col(InferenceRequest.created_at)
    previous = func.lag(at).over(
        partition_by=(col(InferenceRequest.tenant_id), fingerprint), order_by=(at, col(InferenceRequest.request_id))
    )
    rows = (
        select(col(InferenceRequest.modality_mask).label("mask"), at.label("at"), previous.label("previous"))
        .where(_tenants(tenant_id), fingerprint.is_not(None), at >= start - timedelta(seconds=window_s), at < end)
        .subquery()
    )
    again = and_(rows.c.previous.is_not(None), seconds_between(rows.c.at, rows.c.previous) <= window_s)
    query: Any = (
        select(rows.c.mask, func.count(), _counted(again))
        .where(rows.c.at >= start)
        .group_by(rows.c.mask)
        .order_by(rows.c.mask)
    )
    with Session(db) as s:
        found = list(s.exec(query))
    return [
        {"modalities": mix_name(m), "requests": int(n), "regenerated": int(k), "rate": int(k) / int(n)}
        for m, n, k in found
    ]


def record_feedback(db: Engine, tenant_id: str | None, request_id: str, value: int) -> bool:
    """Store the tenant's thumbs (1 up, -1 down) on one of its own requests, replacing any before; False when
    the request is not that tenant's. One UPDATE, so it never overwrites what the usage log or the grounding
    scorer write to the row meanwhile."""
    if value not in (1, -1):
        raise ValueError("feedback is 1 (thumbs up) or -1 (thumbs down)")
    if tenant_id is None:
        return False  # the operator's own rows belong to no tenant, and no one rates them here
    query = (
        update(InferenceRequest)
        .where(col(InferenceRequest.request_id) == request_id, col(InferenceRequest.tenant_id) == tenant_id)
        .values(feedback=value)
    )
    with Session(db) as s:
        changed = s.exec(query).rowcount  # type: ignore[call-overload]
        s.commit()
    return bool(changed == 1)
