"""GET /v1/usage/{request_id} (a receipt, to its own tenant only) and GET /v1/usage (aggregates)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from litestar import get
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery
from sqlalchemy import Engine

from api.openapi import errors
from serving.errors import InvalidRequest, NotFound
from tenancy.directory import Principal
from tenancy.metering import GROUPS, aggregate, receipt


def _when(value: str | None, default: datetime, param: str) -> datetime:
    if not value:
        return default
    try:
        moment = datetime.fromisoformat(value)
        # In UTC, as the database compares them: an offset can carry a moment past year 1 or 9999.
        return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except (ValueError, OverflowError) as exc:
        raise InvalidRequest(f"'{param}' must be an ISO 8601 date or time within years 1-9999", param=param) from exc


@get("/v1/usage/{request_id:str}", responses=errors(400, 401, 404, 429))
async def usage_receipt(
    request_id: FromPath[str], principal: NamedDependency[Principal], db: NamedDependency[Engine]
) -> dict[str, Any]:
    found = await asyncio.to_thread(receipt, db, principal.tenant_id, request_id)
    if found is None:
        raise NotFound(f"no usage record '{request_id}' for this tenant", param="request_id")
    return found


@get("/v1/usage", responses=errors(400, 401, 429))
async def usage_summary(
    principal: NamedDependency[Principal],
    db: NamedDependency[Engine],
    start: FromQuery[str | None] = None,
    end: FromQuery[str | None] = None,
    group_by: FromQuery[str] = "modality",
) -> dict[str, Any]:
    if group_by not in GROUPS:
        raise InvalidRequest(f"group_by must be one of {', '.join(GROUPS)}", param="group_by")
    now = datetime.now(UTC)
    since = _when(start, now - timedelta(days=30), "start")
    until = _when(end, now + timedelta(seconds=1), "end")
    rows = await asyncio.to_thread(aggregate, db, principal.tenant_id, since, until, group_by)
    return {"object": "list", "group_by": group_by, "start": since.isoformat(), "end": until.isoformat(), "data": rows}
