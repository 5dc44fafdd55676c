"""GET /v1/models and /v1/models/{id}: the pools, with their modalities, context length, architecture and where
each medium is encoded."""

from __future__ import annotations

from litestar import get
from litestar.di import NamedDependency
from litestar.params import FromPath

from api.openapi import errors
from api.protocol import ModelCard, ModelList
from serving.errors import NotFound
from serving.pools import ModelPool, PoolRegistry, TaskPool, encoding_places
from tenancy.directory import Principal

ENDPOINTS = {
    "chat": ["/v1/chat/completions", "/v1/responses", "/v1/batches"],
    "embedding": ["/v1/embeddings", "/v1/batches"],
    "transcription": ["/v1/audio/transcriptions", "/v1/audio/translations"],
}


def _card(pool: ModelPool | TaskPool) -> ModelCard:
    kind = pool.kind if isinstance(pool, TaskPool) else "chat"
    endpoints = list(ENDPOINTS[kind])
    if isinstance(pool, TaskPool) and pool.english_only:
        endpoints.remove("/v1/audio/translations")
    return ModelCard(
        id=pool.name,
        created=pool.created,
        modalities=pool.modalities,
        max_model_len=pool.max_model_len,
        aliases=pool.aliases,
        kind=kind,  # type: ignore[arg-type]
        endpoints=endpoints,
        architecture=None if isinstance(pool, TaskPool) else pool.architecture or None,
        encoding={} if isinstance(pool, TaskPool) else encoding_places(pool),
    )


@get("/v1/models", responses=errors(401, 429))
async def list_models(pools: NamedDependency[PoolRegistry], principal: NamedDependency[Principal]) -> ModelList:
    return ModelList(data=[*(_card(p) for p in pools.pools), *(_card(t) for t in pools.tasks)])


@get("/v1/models/{model_id:str}", responses=errors(400, 401, 404, 429))
async def retrieve_model(
    model_id: FromPath[str], pools: NamedDependency[PoolRegistry], principal: NamedDependency[Principal]
) -> ModelCard:
    pool: ModelPool | TaskPool | None = pools.get(model_id) or pools.task(model_id)
    if pool is None:
        raise NotFound(f"the model '{model_id}' does not exist", code="model_not_found", param="model")
    return _card(pool)
