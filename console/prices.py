"""The admin console's prices page: every pool's price per billable dimension and its batch share, each change
written with its audit row (billing.prices)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.response import Template

from billing.prices import BATCH_PERCENT, DIMENSIONS, PriceBook
from console.forms import batch_percent, dollars_to_micros
from console.pages import page
from serving.pools import PoolRegistry
from tenancy.directory import Principal

Form = Annotated[dict[str, Any], Body(media_type=RequestEncodingType.URL_ENCODED)]


def _models(pools: PoolRegistry) -> list[str]:
    return pools.names()


class AdminPricesController(Controller):
    path = "/console/admin"

    @get("/prices")
    async def prices_page(
        self,
        console_admin: NamedDependency[Principal],
        prices: NamedDependency[PriceBook],
        pools: NamedDependency[PoolRegistry],
    ) -> Template:
        return await _prices_page(prices, pools)

    @post("/prices")
    async def set_prices(
        self,
        console_admin: NamedDependency[Principal],
        prices: NamedDependency[PriceBook],
        pools: NamedDependency[PoolRegistry],
        data: Form,
    ) -> Template:
        models = _models(pools)
        current = await asyncio.to_thread(prices.all, models)
        changes = []
        for model in models:
            for dim in DIMENSIONS:
                name = f"{model}.{dim}"
                micros = dollars_to_micros(str(data.get(name, "")), f"The {dim} price of {model}", name)
                if micros is not None and micros != current[model][dim]:
                    changes.append((model, dim, micros))
            name = f"{model}.{BATCH_PERCENT}"
            percent = batch_percent(str(data.get(name, "")), f"The batch price of {model}", name)
            if percent is not None and percent != current[model][BATCH_PERCENT]:
                changes.append((model, BATCH_PERCENT, percent))
        for model, dim, micros in changes:
            await asyncio.to_thread(prices.set, model, dim, micros, actor=console_admin.actor("console"))
        notice = f"{len(changes)} price{'s' if len(changes) != 1 else ''} changed."
        return await _prices_page(prices, pools, notice=notice)


async def _prices_page(prices: PriceBook, pools: PoolRegistry, **extra: Any) -> Template:
    models = _models(pools)
    table = await asyncio.to_thread(prices.all, models)
    return page(
        "console/admin/prices.html.jinja2",
        area="admin",
        active="prices",
        table={
            m: {d: f"{row[d] / 1_000_000:.6f}".rstrip("0").rstrip(".") for d in DIMENSIONS} for m, row in table.items()
        },
        batch={m: row[BATCH_PERCENT] for m, row in table.items()},
        batch_field=BATCH_PERCENT,
        dimensions=DIMENSIONS,
        **extra,
    )
