"""GET /v1/models and /v1/models/{id}: the pools, with their modalities and context length."""

from __future__ import annotations

from typing import Any

from litestar import get

from api.protocol import ModelCard, ModelList
from serving.errors import NotFound
from serving.pools import ModelPool, PoolRegistry
from tenancy.directory import Principal


def _card(pool: ModelPool) -> ModelCard:
    return ModelCard(
        id=pool.name,
        created=pool.created,
        modalities=pool.modalities,
        max_model_len=pool.max_model_len,
        aliases=pool.aliases,
    )


@get("/v1/models")
async def list_models(pools: PoolRegistry, principal: Principal) -> dict[str, Any]:
    return ModelList(data=[_card(p) for p in pools.pools]).model_dump(mode="json")


@get("/v1/models/{model_id:str}")
async def retrieve_model(model_id: str, pools: PoolRegistry, principal: Principal) -> dict[str, Any]:
    pool = pools.get(model_id)
    if pool is None:
        raise NotFound(f"the model '{model_id}' does not exist", code="model_not_found", param="model")
    return _card(pool).model_dump(mode="json")
