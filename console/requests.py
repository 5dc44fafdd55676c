"""Console requests log: a tenant's requests, newest first, filtered and paginated, one request's receipt, and the
tenant's thumbs up or down on an answer."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.enums import RequestEncodingType
from litestar.exceptions import NotFoundException
from litestar.params import Body, FromPath, FromQuery
from litestar.plugins.htmx import HTMXRequest, HTMXTemplate
from litestar.response import Redirect, Template
from sqlalchemy import Engine

from config.settings import Settings
from console.pages import money, page, toasted
from serving.errors import InvalidRequest
from serving.pools import PoolRegistry
from storage.responses import ResponseStore
from tenancy.directory import Principal
from tenancy.metering import MIXES, STATUSES, receipt, record_feedback, requests_page

PER_PAGE = 25
SUMMARY_POLLS = 20  # the playground's summary stops asking after this many tries, about 15 s
# The feedback form's buttons, what each stores, and what the toast says.
FEEDBACK = {"up": (1, "Thanks: marked as a good answer."), "down": (-1, "Thanks: marked as a bad answer.")}


def _filters(model: str | None, mix: str | None, status: str | None, grounding_below: str | None) -> dict[str, Any]:
    if mix and mix not in MIXES:
        raise InvalidRequest(f"modalities must be one of {', '.join(MIXES)}", param="mix")
    if status and status not in STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(STATUSES)}", param="status")
    threshold = None
    if grounding_below:
        try:
            threshold = float(grounding_below)
        except ValueError as exc:
            raise InvalidRequest(
                "the grounding threshold must be a number from 0 to 1", param="grounding_below"
            ) from exc
        if not 0.0 <= threshold <= 1.0:
            raise InvalidRequest("the grounding threshold must be a number from 0 to 1", param="grounding_below")
    return {"model": model or None, "mix": mix or None, "status": status or None, "grounding_below": threshold}


GROUNDING_WAIT_S = 120.0  # past this, an unscored media request is shown as not scored rather than pending


def _row(r: dict[str, Any], grounding: bool = False) -> dict[str, Any]:
    t = r["tokens"]
    age = (datetime.now(UTC) - datetime.fromisoformat(r["created_at"]).replace(tzinfo=UTC)).total_seconds()
    pending = (
        grounding
        and r["grounding_score"] is None
        and bool(set(r["modalities"].split("+")) - {"text"})  # audio and images are scored after the answer
        and r["status"] == "completed"
        and r.get("endpoint", "chat") == "chat"  # only chat answers are scored
        and age < GROUNDING_WAIT_S
    )
    return {
        **r,
        "input_tokens": t["text"] + t["image"] + t["audio"],
        "cost": money(r["cost_micros"]),
        "grounding_pending": pending,
        "followed_by": [{**a, "cost": money(a["cost_micros"])} for a in r.get("followed_by", [])],
    }


class RequestsController(Controller):
    path = "/console/requests"

    @get("/")
    async def log(
        self,
        signed_in: NamedDependency[Principal],
        db: NamedDependency[Engine],
        pools: NamedDependency[PoolRegistry],
        model: FromQuery[str | None] = None,
        mix: FromQuery[str | None] = None,
        status: FromQuery[str | None] = None,
        grounding_below: FromQuery[str | None] = None,
        page_number: FromQuery[int] = 1,
    ) -> Template:
        filters = _filters(model, mix, status, grounding_below)
        rows, total, number = await asyncio.to_thread(
            requests_page, db, signed_in.tenant_id, page=page_number, per_page=PER_PAGE, **filters
        )
        pages = max(1, math.ceil(total / PER_PAGE))
        query = {k: ("" if v is None else v) for k, v in filters.items()}

        def link(n: int) -> str:
            return "/console/requests?" + urlencode({**{k: v for k, v in query.items() if v != ""}, "page_number": n})

        return page(
            "console/requests.html.jinja2",
            area="tenant",
            active="requests",
            tenant=signed_in.tenant_name,
            rows=[_row(r) for r in rows],
            total=total,
            page_number=number,
            pages=pages,
            prev=link(number - 1) if number > 1 else None,
            next=link(number + 1) if number < pages else None,
            query=query,
            models=[p.name for p in pools.pools],
            mixes=list(MIXES),
            statuses=STATUSES,
        )

    @get("/{request_id:str}")
    async def detail(
        self,
        request_id: FromPath[str],
        signed_in: NamedDependency[Principal],
        db: NamedDependency[Engine],
        settings: NamedDependency[Settings],
        stored_responses: NamedDependency[ResponseStore | None],
    ) -> Template:
        found = await asyncio.to_thread(receipt, db, signed_in.tenant_id, request_id)
        if found is None:
            raise NotFoundException(f"no request '{request_id}' for this tenant")
        conversation = None
        if stored_responses is not None and signed_in.tenant_id is not None:
            conversation = await asyncio.to_thread(stored_responses.conversation_of, signed_in.tenant_id, request_id)
        return page(
            "console/receipt.html.jinja2",
            area="tenant",
            active="requests",
            tenant=signed_in.tenant_name,
            r=_row(found, settings.grounding),
            conversation=conversation,
        )

    @get("/{request_id:str}/summary")
    async def summary(
        self,
        request_id: FromPath[str],
        signed_in: NamedDependency[Principal],
        db: NamedDependency[Engine],
        settings: NamedDependency[Settings],
        attempt: FromQuery[int] = 0,
    ) -> Template:
        """Cost and grounding of a request just run in the playground; the fragment re-polls itself while the
        usage record or its grounding score is still being written."""
        found = await asyncio.to_thread(receipt, db, signed_in.tenant_id, request_id)
        row = _row(found, settings.grounding) if found else None
        pending = row is None or row["grounding_pending"]
        return page(
            "console/_summary.html.jinja2",
            area="tenant",
            r=row,
            request_id=request_id,
            next_attempt=attempt + 1 if pending and attempt + 1 < SUMMARY_POLLS else None,
        )

    @post("/{request_id:str}/feedback")
    async def feedback(
        self,
        request: HTMXRequest,
        request_id: FromPath[str],
        signed_in: NamedDependency[Principal],
        db: NamedDependency[Engine],
        data: Annotated[dict[str, Any], Body(media_type=RequestEncodingType.URL_ENCODED)],
    ) -> HTMXTemplate | Redirect:
        """Thumbs up or down on one of the tenant's answers; pressing again replaces it. With HTMX the buttons are
        swapped in place; a plain form goes on to the receipt, which shows the rating."""
        choice = FEEDBACK.get(str(data.get("feedback", "")).strip())
        if choice is None:
            raise InvalidRequest("feedback must be up or down", param="feedback")
        value, thanks = choice
        if not await asyncio.to_thread(record_feedback, db, signed_in.tenant_id, request_id, value):
            raise NotFoundException(f"no request '{request_id}' for this tenant")
        if not request.htmx:
            return Redirect(f"/console/requests/{request_id}", status_code=303)
        return toasted(
            "console/_feedback.html.jinja2",
            message=thanks,
            area="tenant",
            r={"request_id": request_id, "feedback": value},
        )
