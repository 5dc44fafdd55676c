"""Console keys page: a tenant's keys by prefix, issuing (shown once), revoking and model restrictions."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath
from litestar.response import Template

from console.pages import page
from serving.errors import NotFound
from serving.pools import PoolRegistry
from tenancy.directory import Directory, Principal

EXPIRY_DAYS = (7, 30, 90, 365)


def key_options(data: dict[str, Any], pools: PoolRegistry) -> tuple[dict[str, Any], str | None]:
    """The key form as `issue_key` arguments (name, models, expiry), and an error when it is not valid."""
    models, error = picked_models(data, pools)
    expires = str(data.get("expires_days") or "").strip()
    expires_at = None
    if expires:
        if not expires.isdigit() or int(expires) not in EXPIRY_DAYS:
            return {}, f"expiry must be one of {', '.join(map(str, EXPIRY_DAYS))} days, or never"
        expires_at = datetime.now(UTC) + timedelta(days=int(expires))
    options = {"name": str(data.get("name", ""))[:128], "allowed_models": models or None, "expires_at": expires_at}
    return options, error


def picked_models(data: dict[str, Any], pools: PoolRegistry) -> tuple[list[str], str | None]:
    """The model checkboxes of a key form, and an error when one names no pool."""
    models = data.get("models") or []
    models = [models] if isinstance(models, str) else list(models)
    unknown = set(models) - set(pools.names())
    return models, (f"unknown models: {', '.join(sorted(unknown))}" if unknown else None)


RESTRICTED = (
    "This key is limited to some models or expires, so it can list keys but not issue or revoke them: "
    "otherwise it could mint a key broader than itself. Sign in with an unrestricted key to manage keys."
)


def can_manage(signed_in: Principal) -> bool:
    """Only a key without model limits or expiry manages the tenant's keys."""
    return signed_in.allowed_models is None and signed_in.expires_at is None


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
        expiry_days=EXPIRY_DAYS,
        now=datetime.now(UTC).replace(tzinfo=None),
        current=signed_in.key_id,
        action="/console/keys",
        manage=can_manage(signed_in),
        **extra,
    )


class KeysController(Controller):
    path = "/console/keys"

    @get("/")
    async def keys_page(
        self,
        signed_in: NamedDependency[Principal],
        directory: NamedDependency[Directory],
        pools: NamedDependency[PoolRegistry],
    ) -> Template:
        return await _render(signed_in, directory, pools)

    @post("/")
    async def create(
        self,
        signed_in: NamedDependency[Principal],
        directory: NamedDependency[Directory],
        pools: NamedDependency[PoolRegistry],
        data: Annotated[dict[str, Any], Body(media_type=RequestEncodingType.URL_ENCODED)],
    ) -> Template:
        if not can_manage(signed_in):
            return await _render(signed_in, directory, pools, status_code=403, error=RESTRICTED)
        options, error = key_options(data, pools)
        if error:
            return await _render(signed_in, directory, pools, status_code=400, error=error)
        actor = signed_in.actor("console")
        issued = await asyncio.to_thread(directory.issue_key, signed_in.tenant_id, actor=actor, **options)
        return await _render(signed_in, directory, pools, status_code=201, issued=issued.key)

    @post("/{key_id:str}/revoke")
    async def revoke(
        self,
        key_id: FromPath[str],
        signed_in: NamedDependency[Principal],
        directory: NamedDependency[Directory],
        pools: NamedDependency[PoolRegistry],
    ) -> Template:
        if not can_manage(signed_in):
            return await _render(signed_in, directory, pools, status_code=403, error=RESTRICTED)
        if key_id == signed_in.key_id:
            error = "This is the key you signed in with; sign in with another key to revoke it."
            return await _render(signed_in, directory, pools, status_code=409, error=error)
        try:
            actor = signed_in.actor("console")
            await asyncio.to_thread(directory.revoke_key, key_id, tenant_id=signed_in.tenant_id, actor=actor)
        except NotFound:
            return await _render(signed_in, directory, pools, status_code=404, error="No such key for this tenant.")
        return await _render(signed_in, directory, pools)
