"""Console keys page: a tenant's keys by prefix, issuing (shown once), revoking and model restrictions."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from litestar import Controller, get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.response import Template

from console.pages import page
from serving.pools import PoolRegistry
from tenancy.directory import Directory, DirectoryError, Principal


def picked_models(data: dict[str, Any], pools: PoolRegistry) -> tuple[list[str], str | None]:
    """The model checkboxes of a key form, and an error when one names no pool."""
    models = data.get("models") or []
    models = [models] if isinstance(models, str) else list(models)
    unknown = set(models) - {p.name for p in pools.pools}
    return models, (f"unknown models: {', '.join(sorted(unknown))}" if unknown else None)


async def _render(
    signed_in: Principal, directory: Directory, pools: PoolRegistry, status_code: int = 200, **extra: Any
) -> Template:
    keys = await asyncio.to_thread(directory.keys, signed_in.tenant_id)
    return page(
        "console/keys.html.jinja2",
        area="tenant",
        active="keys",
        status_code=status_code,
        tenant=signed_in.tenant_name,
        keys=keys,
        models=[p.name for p in pools.pools],
        current=signed_in.key_id,
        action="/console/keys",
        **extra,
    )


class KeysController(Controller):
    path = "/console/keys"

    @get("/")
    async def keys_page(self, signed_in: Principal, directory: Directory, pools: PoolRegistry) -> Template:
        return await _render(signed_in, directory, pools)

    @post("/")
    async def create(
        self,
        signed_in: Principal,
        directory: Directory,
        pools: PoolRegistry,
        data: Annotated[dict[str, Any], Body(media_type=RequestEncodingType.URL_ENCODED)],
    ) -> Template:
        models, error = picked_models(data, pools)
        if error:
            return await _render(signed_in, directory, pools, status_code=400, error=error)
        issued = await asyncio.to_thread(
            directory.issue_key,
            signed_in.tenant_id,
            name=str(data.get("name", ""))[:128],
            allowed_models=models or None,
        )
        return await _render(signed_in, directory, pools, status_code=201, issued=issued.key)

    @post("/{key_id:str}/revoke")
    async def revoke(self, key_id: str, signed_in: Principal, directory: Directory, pools: PoolRegistry) -> Template:
        if key_id == signed_in.key_id:
            error = "This is the key you signed in with; sign in with another key to revoke it."
            return await _render(signed_in, directory, pools, status_code=409, error=error)
        try:
            await asyncio.to_thread(directory.revoke_key, key_id, tenant_id=signed_in.tenant_id)
        except DirectoryError:
            return await _render(signed_in, directory, pools, status_code=404, error="No such key for this tenant.")
        return await _render(signed_in, directory, pools)
