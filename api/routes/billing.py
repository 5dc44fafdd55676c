"""Prices and billing dead letters (admin), and the Stripe webhook endpoint."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Annotated, Any

from litestar import Controller, Request, get, post, put
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, Parameter
from pydantic import BaseModel, Field
from sqlalchemy import Engine

from api.openapi import errors
from api.protocol import STORED_INT_MAX
from billing import outbox
from billing.prices import BATCH_PERCENT, DIMENSIONS, PriceBook
from billing.webhooks import receive
from config.settings import Settings
from serving.errors import InvalidRequest
from serving.pools import PoolRegistry
from tenancy.directory import Principal


class PriceIn(BaseModel):
    micros_per_million: int = Field(
        ge=0, le=STORED_INT_MAX, description="Price per 1M tokens, in millionths of the currency unit."
    )


Dimension = Annotated[
    str,
    Parameter(
        pattern=f"^({'|'.join((*DIMENSIONS, BATCH_PERCENT))})$",
        description=f"The billable dimension the price is for, or {BATCH_PERCENT}: the share of the prices (0 to 100) "
        "that batch lines pay.",
    ),
]


class PriceController(Controller):
    path = "/admin/prices"

    @get("/", responses=errors(401, 403, 429))
    async def list_prices(
        self, prices: NamedDependency[PriceBook], pools: NamedDependency[PoolRegistry]
    ) -> dict[str, Any]:
        table = await asyncio.to_thread(prices.all, pools.names())
        return {"object": "list", "dimensions": list(DIMENSIONS), "data": table}

    @put("/{model:str}/{dimension:str}", responses=errors(400, 401, 403, 429))
    async def set_price(
        self,
        model: FromPath[str],
        dimension: Dimension,
        data: JSONBody[PriceIn],
        prices: NamedDependency[PriceBook],
        principal: NamedDependency[Principal],
    ) -> dict[str, Any]:
        try:
            await asyncio.to_thread(prices.set, model, dimension, data.micros_per_million, actor=principal.actor("api"))
        except ValueError as exc:
            raise InvalidRequest(str(exc), param="micros_per_million") from None
        return {"model": model, "dimension": dimension, "micros_per_million": data.micros_per_million}


class BillingAdminController(Controller):
    path = "/admin/billing"

    @get("/dead-letters", responses=errors(400, 401, 403, 429))
    async def dead_letters(
        self, db: NamedDependency[Engine], limit: Annotated[int, Parameter(ge=1, le=1000)] = 100
    ) -> dict[str, Any]:
        """Meter events Stripe will never accept, newest first, with why; and the outbox's rows per status."""
        letters, counts = await asyncio.gather(
            asyncio.to_thread(outbox.dead_letters, db, limit), asyncio.to_thread(outbox.counts, db)
        )
        return {"object": "list", "counts": counts, "data": [asdict(d) for d in letters]}


@post("/v1/billing/webhooks/stripe", status_code=200, responses=errors(400), security=[])
async def stripe_webhook(
    request: Request[Any, Any, Any], db: NamedDependency[Engine], settings: NamedDependency[Settings]
) -> dict[str, Any]:
    if not settings.stripe_webhook_secret:
        raise InvalidRequest("Stripe webhooks are not configured", code="webhooks_disabled")
    payload = await request.body()
    try:
        outcome, event = await asyncio.to_thread(
            receive, db, payload, request.headers.get("stripe-signature"), settings.stripe_webhook_secret
        )
    except ValueError as exc:
        raise InvalidRequest(str(exc), code="invalid_signature") from exc
    return {"received": True, "outcome": outcome, "id": event["id"]}
