"""The admin JSON API: tenants, their quotas and keys. Every handler needs an admin principal."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from litestar import Controller, get, patch, post, put
from pydantic import BaseModel, Field

from api.errors import APIError
from db.models import ApiKey, Tenant, TenantQuota
from tenancy.directory import Directory, DirectoryError


class TenantIn(BaseModel):
    name: str
    tokens_per_minute: int = Field(default=100_000, ge=0)
    concurrent_requests: int = Field(default=16, ge=1)
    monthly_token_budget: int | None = Field(default=None, ge=0)


class TenantPatch(BaseModel):
    status: str


class QuotaIn(BaseModel):
    tokens_per_minute: int | None = Field(default=None, ge=0)
    concurrent_requests: int | None = Field(default=None, ge=1)
    monthly_token_budget: int | None = Field(default=None, ge=0)
    monthly_cost_budget_micros: int | None = Field(default=None, ge=0)
    tier: str | None = None


class KeyIn(BaseModel):
    name: str = ""
    allowed_models: list[str] | None = None
    expires_at: datetime | None = None


def _tenant(t: Tenant, q: TenantQuota | None) -> dict[str, Any]:
    quota = q.model_dump(exclude={"tenant_id"}) if q else None
    return {"id": t.id, "name": t.name, "status": t.status, "created_at": t.created_at.isoformat(), "quota": quota}


def _key(k: ApiKey) -> dict[str, Any]:
    return {
        "id": k.id,
        "tenant_id": k.tenant_id,
        "prefix": k.prefix,
        "name": k.name,
        "allowed_models": k.allowed_models.split(",") if k.allowed_models else None,
        "expires_at": k.expires_at.isoformat() if k.expires_at else None,
        "revoked": k.revoked_at is not None,
        "created_at": k.created_at.isoformat(),
    }


async def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    except DirectoryError as exc:
        err = APIError(exc.message, code=exc.code)
        err.status_code = exc.status
        raise err from exc


class AdminController(Controller):
    path = "/admin"

    @get("/tenants")
    async def list_tenants(self, directory: Directory, admin: Any) -> dict[str, Any]:
        rows = await _call(directory.tenants)
        return {"object": "list", "data": [_tenant(t, q) for t, q in rows]}

    @post("/tenants", status_code=201)
    async def create_tenant(self, data: TenantIn, directory: Directory, admin: Any) -> dict[str, Any]:
        tenant = await _call(
            directory.create_tenant,
            data.name,
            tokens_per_minute=data.tokens_per_minute,
            concurrency=data.concurrent_requests,
            monthly_token_budget=data.monthly_token_budget,
        )
        quota = await _call(directory.set_quota, tenant.id)
        return _tenant(tenant, quota)

    @patch("/tenants/{tenant_id:str}")
    async def update_tenant(
        self, tenant_id: str, data: TenantPatch, directory: Directory, admin: Any
    ) -> dict[str, Any]:
        tenant = await _call(directory.set_status, tenant_id, data.status)
        return _tenant(tenant, None)

    @put("/tenants/{tenant_id:str}/quota")
    async def set_quota(self, tenant_id: str, data: QuotaIn, directory: Directory, admin: Any) -> dict[str, Any]:
        quota = await _call(directory.set_quota, tenant_id, **data.model_dump(exclude_none=True))
        return quota.model_dump()

    @get("/tenants/{tenant_id:str}/keys")
    async def list_keys(self, tenant_id: str, directory: Directory, admin: Any) -> dict[str, Any]:
        return {"object": "list", "data": [_key(k) for k in await _call(directory.keys, tenant_id)]}

    @post("/tenants/{tenant_id:str}/keys", status_code=201)
    async def create_key(self, tenant_id: str, data: KeyIn, directory: Directory, admin: Any) -> dict[str, Any]:
        issued = await _call(
            directory.issue_key,
            tenant_id,
            name=data.name,
            allowed_models=data.allowed_models,
            expires_at=data.expires_at,
        )
        return {"id": issued.key_id, "prefix": issued.prefix, "key": issued.key}

    @post("/keys/{key_id:str}/revoke", status_code=200)
    async def revoke_key(self, key_id: str, directory: Directory, admin: Any) -> dict[str, Any]:
        return _key(await _call(directory.revoke_key, key_id))
