"""The admin JSON API: tenants, their quotas and keys. The router guards every handler with the admin check."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, Literal

from litestar import Controller, get, patch, post, put
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody
from pydantic import BaseModel, Field, field_validator
from sqlalchemy import Engine

from api.openapi import errors
from api.protocol import STORED_INT_MAX, StoredText
from serving.errors import InvalidRequest
from storage.audit import audit_page, entry_summary
from tenancy.directory import MAX_RETENTION_DAYS, Directory, Principal, key_summary, tenant_summary


class TenantIn(BaseModel):
    name: StoredText
    tokens_per_minute: int = Field(default=100_000, ge=0, le=STORED_INT_MAX)
    concurrent_requests: int = Field(default=16, ge=1, le=STORED_INT_MAX)
    monthly_token_budget: int | None = Field(default=None, ge=0, le=STORED_INT_MAX)


class TenantPatch(BaseModel):
    status: Literal["active", "suspended"]


class QuotaIn(BaseModel):
    tokens_per_minute: int | None = Field(default=None, ge=0, le=STORED_INT_MAX)
    concurrent_requests: int | None = Field(default=None, ge=1, le=STORED_INT_MAX)
    monthly_token_budget: int | None = Field(default=None, ge=0, le=STORED_INT_MAX)
    monthly_cost_budget_micros: int | None = Field(default=None, ge=0, le=STORED_INT_MAX)
    tier: StoredText | None = None
    grounding_policy: Literal["off", "score", "flag", "block"] | None = None
    grounding_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    grounding_evidence: Literal["label_head", "judge", "both"] | None = None
    routing_policy: Literal["heuristic", "cascade", "router", "weakest", "strongest"] | None = None
    store_responses: bool | None = None
    response_retention_days: int | None = Field(default=None, ge=1, le=MAX_RETENTION_DAYS)


class KeyIn(BaseModel):
    name: StoredText = ""
    allowed_models: list[StoredText] | None = None
    expires_at: datetime | None = None

    @field_validator("expires_at")
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        """In UTC, as it is stored: an offset can carry a moment past year 1 or 9999."""
        if value is None or value.tzinfo is None:
            return value
        try:
            return value.astimezone(UTC)
        except OverflowError as exc:
            raise ValueError("expires_at must fall within years 1-9999 in UTC") from exc


class AdminController(Controller):
    path = "/admin"

    @get("/tenants", responses=errors(401, 403, 429))
    async def list_tenants(self, directory: NamedDependency[Directory]) -> dict[str, Any]:
        rows = await asyncio.to_thread(directory.tenants)
        return {"object": "list", "data": [tenant_summary(t, q) for t, q in rows]}

    @post("/tenants", status_code=201, responses=errors(400, 401, 403, 409, 429))
    async def create_tenant(
        self, data: JSONBody[TenantIn], directory: NamedDependency[Directory], principal: NamedDependency[Principal]
    ) -> dict[str, Any]:
        tenant = await asyncio.to_thread(
            directory.create_tenant,
            data.name,
            tokens_per_minute=data.tokens_per_minute,
            concurrency=data.concurrent_requests,
            monthly_token_budget=data.monthly_token_budget,
            actor=principal.actor("api"),
        )
        quota = await asyncio.to_thread(directory.quota, tenant.id)
        return tenant_summary(tenant, quota)

    @patch("/tenants/{tenant_id:str}", responses=errors(400, 401, 403, 404, 429))
    async def update_tenant(
        self,
        tenant_id: FromPath[str],
        data: JSONBody[TenantPatch],
        directory: NamedDependency[Directory],
        principal: NamedDependency[Principal],
    ) -> dict[str, Any]:
        tenant = await asyncio.to_thread(directory.set_status, tenant_id, data.status, actor=principal.actor("api"))
        return tenant_summary(tenant, None)

    @put("/tenants/{tenant_id:str}/quota", responses=errors(400, 401, 403, 404, 429))
    async def set_quota(
        self,
        tenant_id: FromPath[str],
        data: JSONBody[QuotaIn],
        directory: NamedDependency[Directory],
        principal: NamedDependency[Principal],
    ) -> dict[str, Any]:
        fields = data.model_dump(exclude_none=True)
        quota = await asyncio.to_thread(directory.set_quota, tenant_id, actor=principal.actor("api"), **fields)
        return quota.model_dump()

    @get("/tenants/{tenant_id:str}/keys", responses=errors(400, 401, 403, 429))
    async def list_keys(self, tenant_id: FromPath[str], directory: NamedDependency[Directory]) -> dict[str, Any]:
        keys = await asyncio.to_thread(directory.keys, tenant_id)
        return {"object": "list", "data": [key_summary(k) for k in keys]}

    @post("/tenants/{tenant_id:str}/keys", status_code=201, responses=errors(400, 401, 403, 404, 429))
    async def create_key(
        self,
        tenant_id: FromPath[str],
        data: JSONBody[KeyIn],
        directory: NamedDependency[Directory],
        principal: NamedDependency[Principal],
    ) -> dict[str, Any]:
        issued = await asyncio.to_thread(
            directory.issue_key,
            tenant_id,
            name=data.name,
            allowed_models=data.allowed_models,
            expires_at=data.expires_at,
            actor=principal.actor("api"),
        )
        return {"id": issued.key_id, "prefix": issued.prefix, "key": issued.key}

    @post("/keys/{key_id:str}/revoke", status_code=200, responses=errors(400, 401, 403, 404, 429))
    async def revoke_key(
        self, key_id: FromPath[str], directory: NamedDependency[Directory], principal: NamedDependency[Principal]
    ) -> dict[str, Any]:
        return key_summary(await asyncio.to_thread(directory.revoke_key, key_id, actor=principal.actor("api")))

    @get("/audit", responses=errors(400, 401, 403, 429))
    async def audit_log(
        self,
        db: NamedDependency[Engine],
        actor: FromQuery[str | None] = None,
        action: FromQuery[str | None] = None,
        target: FromQuery[str | None] = None,
        before: FromQuery[int | None] = None,
        limit: FromQuery[int] = 50,
    ) -> dict[str, Any]:
        """Admin changes, newest first: filtered by actor, action (or its family, e.g. `quota`) and target; page with
        `before` (the previous page's `next_cursor`)."""
        if not 1 <= limit <= 500:
            raise InvalidRequest("limit must lie in [1, 500]", param="limit")
        found = await asyncio.to_thread(
            audit_page, db, actor=actor, action=action, target=target, before=before, limit=limit
        )
        return {"object": "list", "data": [entry_summary(r) for r in found.rows], "next_cursor": found.next_cursor}
