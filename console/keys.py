"""Console keys page: a tenant's keys by prefix, issuing (shown once), revoking and model restrictions."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.enums import MediaType, RequestEncodingType
from litestar.exceptions import NotAuthorizedException
from litestar.params import Body
from litestar.response import Redirect, Template

from console.controllers import console_principal
from serving.pools import PoolRegistry
from tenancy.directory import Directory, DirectoryError, Principal


def _page(principal: Principal, directory: Directory, pools: PoolRegistry, **extra: Any) -> dict[str, Any]:
    keys = directory.keys(principal.tenant_id)
    return {
        "tenant": principal.tenant_name,
        "keys": keys,
        "models": [p.name for p in pools.pools],
        "current": principal.key_id,
        **extra,
    }


class KeysController(Controller):
    path = "/console/keys"

    @get("/")
    async def keys_page(self, request: Request[Any, Any, Any], directory: Directory, pools: PoolRegistry) -> Any:
        try:
            principal = await console_principal(request, directory)
        except NotAuthorizedException:
            return Redirect("/console/signin")
        context = await asyncio.to_thread(_page, principal, directory, pools)
        return Template("console/keys.html.jinja2", context=context, media_type=MediaType.HTML)

    @post("/")
    async def create(
        self,
        request: Request[Any, Any, Any],
        directory: Directory,
        pools: PoolRegistry,
        data: Annotated[dict[str, Any], Body(media_type=RequestEncodingType.URL_ENCODED)],
    ) -> Template:
        principal = await console_principal(request, directory)
        models = data.get("models") or []
        models = [models] if isinstance(models, str) else list(models)
        unknown = set(models) - {p.name for p in pools.pools}
        if unknown:
            context = await asyncio.to_thread(
                _page, principal, directory, pools, error=f"unknown models: {', '.join(sorted(unknown))}"
            )
            return Template("console/keys.html.jinja2", context=context, media_type=MediaType.HTML, status_code=400)
        issued = await asyncio.to_thread(
            directory.issue_key,
            principal.tenant_id,
            name=str(data.get("name", ""))[:128],
            allowed_models=models or None,
        )
        context = await asyncio.to_thread(_page, principal, directory, pools, issued=issued.key)
        return Template("console/keys.html.jinja2", context=context, media_type=MediaType.HTML)

    @post("/{key_id:str}/revoke")
    async def revoke(
        self, request: Request[Any, Any, Any], key_id: str, directory: Directory, pools: PoolRegistry
    ) -> Template:
        principal = await console_principal(request, directory)
        error = None
        if key_id == principal.key_id:
            error = "This is the key you signed in with; sign in with another key to revoke it."
        else:
            try:
                await asyncio.to_thread(directory.revoke_key, key_id, tenant_id=principal.tenant_id)
            except DirectoryError:
                error = "No such key for this tenant."
        context = await asyncio.to_thread(_page, principal, directory, pools, error=error)
        return Template(
            "console/keys.html.jinja2",
            context=context,
            media_type=MediaType.HTML,
            status_code=404 if error == "No such key for this tenant." else 200,
        )
