"""The admin area of the console: an overview (the pools live, answer quality across tenants, the latest grounding
eval), tenants (create, suspend, quotas and guardrail, usage, keys) and prices. It calls the same directory and
price book as the JSON admin API."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.enums import MediaType, RequestEncodingType
from litestar.exceptions import NotFoundException
from litestar.params import Body, FromPath, FromQuery
from litestar.response import Redirect, Template
from sqlalchemy import Engine

from api.auth import Authenticator
from config.settings import Settings
from console.auth import ADMIN_SESSION, admin_marker, sign_in, sign_out
from console.batches import admin_batches
from console.forms import quota_fields, threshold_step
from console.keys import EXPIRY_DAYS, key_options
from console.live import live_figures
from console.pages import money, page
from console.quality import EVAL_HTML, EVAL_JSON, EVAL_REPORT_POLICY, eval_headline, eval_report_html, overview_quality
from console.usage import csv_response, date_range, day_bounds, gauges, usage_csv, usage_view
from serving.errors import InvalidRequest
from serving.metrics import ServerMetrics
from serving.pools import PoolRegistry
from serving.routing import ROUTING_POLICIES
from storage.batches import BatchStore
from tenancy.console_sessions import ConsoleSessions
from tenancy.directory import (
    GROUNDING_EVIDENCE,
    GROUNDING_POLICIES,
    Directory,
    Principal,
    Tenant,
    TenantQuota,
)
from tenancy.limits import RateLimiter
from tenancy.metering import month_by_tenant

Form = Annotated[dict[str, Any], Body(media_type=RequestEncodingType.URL_ENCODED)]
# The quota form's choices, and the guardrail a new tenant starts with (the table's defaults).
QUOTA_FORM = {
    "grounding_policies": GROUNDING_POLICIES,
    "grounding_evidence": GROUNDING_EVIDENCE,
    "routing_policies": ROUTING_POLICIES,
    "threshold_step": threshold_step,
    "new_quota": TenantQuota(tenant_id=""),
}


@dataclass(frozen=True)
class TenantViews:
    """What the admin's tenant page is drawn from; one dependency instead of five on every handler."""

    directory: Directory
    pools: PoolRegistry
    db: Engine
    limiter: RateLimiter
    settings: Settings

    async def gauges(self, tenant_id: str, quota: TenantQuota | None = None) -> list[dict[str, Any]]:
        quota = quota or await asyncio.to_thread(self.directory.quota, tenant_id)
        return await gauges(self.limiter, self.db, tenant_id, quota, self.settings.rate_window_s)

    async def page(
        self,
        tenant_id: str,
        *,
        start: str | None = None,
        end: str | None = None,
        status_code: int = 200,
        **extra: Any,
    ) -> Template:
        tenant: Tenant = await asyncio.to_thread(self.directory.tenant, tenant_id)
        first, last = date_range(start, end)
        quota = await asyncio.to_thread(self.directory.quota, tenant.id)
        view = await asyncio.to_thread(usage_view, self.db, tenant.id, first, last)
        keys = await asyncio.to_thread(self.directory.keys, tenant.id)
        base = f"/console/admin/tenants/{tenant.id}"
        return page(
            "console/admin/tenant.html.jinja2",
            area="admin",
            active="tenants",
            status_code=status_code,
            t=tenant,
            tenant=tenant.name,
            quota=quota,
            view=view,
            gauges=await self.gauges(tenant.id, quota),
            base=base,
            keys=keys,
            models=[p.name for p in self.pools.pools],
            expiry_days=EXPIRY_DAYS,
            now=datetime.now(UTC).replace(tzinfo=None),
            current=None,
            action=f"{base}/keys",
            manage=True,
            **QUOTA_FORM,
            **extra,
        )


def tenant_views(
    directory: NamedDependency[Directory],
    pools: NamedDependency[PoolRegistry],
    db: NamedDependency[Engine],
    limiter: NamedDependency[RateLimiter],
    settings: NamedDependency[Settings],
) -> TenantViews:
    return TenantViews(directory, pools, db, limiter, settings)


class AdminConsoleController(Controller):
    path = "/console/admin"
    dependencies = {"views": Provide(tenant_views, sync_to_thread=False)}  # noqa: RUF012 (Litestar reads it)

    @get("/signin")
    async def signin_page(self) -> Template:
        return _signin()

    @post("/signin")
    async def signin(
        self,
        request: Request[Any, Any, Any],
        directory: NamedDependency[Directory],
        auth: NamedDependency[Authenticator],
        console_sessions: NamedDependency[ConsoleSessions],
        data: Form,
    ) -> Any:
        marker = await asyncio.to_thread(admin_marker, auth, directory, str(data.get("api_key", "")).strip())
        if marker is None:
            return _signin(error="That is not an admin key.", status_code=401)
        await sign_in(request, console_sessions, ADMIN_SESSION, marker)
        return Redirect("/console/admin/", status_code=303)

    @post("/signout")
    async def signout(
        self, request: Request[Any, Any, Any], console_sessions: NamedDependency[ConsoleSessions]
    ) -> Redirect:
        await sign_out(request, console_sessions, ADMIN_SESSION)
        return Redirect("/console/admin/signin", status_code=303)

    # -- overview -----------------------------------------------------------------------------------------

    @get("/")
    async def overview(
        self,
        console_admin: NamedDependency[Principal],
        server_metrics: NamedDependency[ServerMetrics],
        pools: NamedDependency[PoolRegistry],
        cache: NamedDependency[Any],
        db: NamedDependency[Engine],
        batches: NamedDependency[BatchStore | None],
        directory: NamedDependency[Directory],
        start: FromQuery[str | None] = None,
        end: FromQuery[str | None] = None,
    ) -> Template:
        first, last = date_range(start, end)
        quality = await asyncio.to_thread(overview_quality, db, *day_bounds(first, last))
        return page(
            "console/admin/overview.html.jinja2",
            area="admin",
            active="overview",
            live=live_figures(server_metrics, pools, cache),
            quality=quality,
            start=first.isoformat(),
            end=last.isoformat(),
            eval_report=await asyncio.to_thread(eval_headline),
            eval_json=EVAL_JSON,
            eval_html=EVAL_HTML,
            **await admin_batches(batches, directory),
        )

    @get("/eval/grounding.html")
    async def eval_report(self, console_admin: NamedDependency[Principal]) -> Response[str]:
        """The latest grounding eval's own HTML page, from its one fixed path, shown sandboxed."""
        body = await asyncio.to_thread(eval_report_html)
        if body is None:
            raise NotFoundException(f"there is no eval report at {EVAL_HTML}: run tessera eval grounding --report")
        headers = {"content-security-policy": EVAL_REPORT_POLICY, "cache-control": "no-store"}
        return Response(body, media_type=MediaType.HTML, headers=headers)

    @get("/live")
    async def live(
        self,
        console_admin: NamedDependency[Principal],
        server_metrics: NamedDependency[ServerMetrics],
        pools: NamedDependency[PoolRegistry],
        cache: NamedDependency[Any],
    ) -> Template:
        return page("console/admin/_live.html.jinja2", area="admin", live=live_figures(server_metrics, pools, cache))

    @get("/batches")
    async def batch_list(
        self,
        console_admin: NamedDependency[Principal],
        batches: NamedDependency[BatchStore | None],
        directory: NamedDependency[Directory],
    ) -> Template:
        return page("console/_batches.html.jinja2", area="admin", **await admin_batches(batches, directory))

    # -- tenants ------------------------------------------------------------------------------------------

    @get("/tenants")
    async def tenants(
        self,
        console_admin: NamedDependency[Principal],
        directory: NamedDependency[Directory],
        db: NamedDependency[Engine],
    ) -> Template:
        return await _tenants_page(directory, db)

    @post("/tenants")
    async def create_tenant(
        self,
        console_admin: NamedDependency[Principal],
        directory: NamedDependency[Directory],
        db: NamedDependency[Engine],
        data: Form,
    ) -> Template:
        name = str(data.get("name", "")).strip()
        if not name or len(name) > 128:
            raise InvalidRequest("a tenant needs a name of 1 to 128 characters", param="name")
        fields = quota_fields(data)
        tenant = await asyncio.to_thread(
            directory.create_tenant,
            name,
            tokens_per_minute=fields["tokens_per_minute"],
            concurrency=fields["concurrent_requests"],
            monthly_token_budget=fields["monthly_token_budget"],
            actor=console_admin.actor("console"),
        )
        await asyncio.to_thread(directory.set_quota, tenant.id, actor=console_admin.actor("console"), **fields)
        return await _tenants_page(directory, db, created=tenant.name, status_code=201)

    @get("/tenants/{tenant_id:str}")
    async def tenant(
        self,
        tenant_id: FromPath[str],
        console_admin: NamedDependency[Principal],
        views: NamedDependency[TenantViews],
        start: FromQuery[str | None] = None,
        end: FromQuery[str | None] = None,
    ) -> Template:
        return await views.page(tenant_id, start=start, end=end)

    @post("/tenants/{tenant_id:str}/status")
    async def set_status(
        self,
        tenant_id: FromPath[str],
        console_admin: NamedDependency[Principal],
        views: NamedDependency[TenantViews],
        data: Form,
    ) -> Template:
        status = str(data.get("status", ""))
        await asyncio.to_thread(views.directory.set_status, tenant_id, status, actor=console_admin.actor("console"))
        return await views.page(tenant_id, notice="Status saved.")

    @post("/tenants/{tenant_id:str}/quota")
    async def set_quota(
        self,
        tenant_id: FromPath[str],
        console_admin: NamedDependency[Principal],
        views: NamedDependency[TenantViews],
        data: Form,
    ) -> Template:
        actor = console_admin.actor("console")
        await asyncio.to_thread(views.directory.set_quota, tenant_id, actor=actor, **quota_fields(data))
        return await views.page(tenant_id, notice="Quota saved.")

    @get("/tenants/{tenant_id:str}/gauges")
    async def tenant_gauges(
        self,
        tenant_id: FromPath[str],
        console_admin: NamedDependency[Principal],
        views: NamedDependency[TenantViews],
    ) -> Template:
        found = await views.gauges(tenant_id)
        return page(
            "console/_gauges.html.jinja2", area="admin", gauges=found, base=f"/console/admin/tenants/{tenant_id}"
        )

    @get("/tenants/{tenant_id:str}/export.csv")
    async def tenant_csv(
        self,
        tenant_id: FromPath[str],
        console_admin: NamedDependency[Principal],
        directory: NamedDependency[Directory],
        db: NamedDependency[Engine],
        start: FromQuery[str | None] = None,
        end: FromQuery[str | None] = None,
    ) -> Response[str]:
        tenant: Tenant = await asyncio.to_thread(directory.tenant, tenant_id)
        first, last = date_range(start, end)
        body = await asyncio.to_thread(usage_csv, db, tenant.id, first, last)
        return csv_response(body, tenant.name, first, last)

    @post("/tenants/{tenant_id:str}/keys")
    async def issue_key(
        self,
        tenant_id: FromPath[str],
        console_admin: NamedDependency[Principal],
        views: NamedDependency[TenantViews],
        data: Form,
    ) -> Template:
        options, error = key_options(data, views.pools)
        if error:
            raise InvalidRequest(error, param="models")
        actor = console_admin.actor("console")
        issued = await asyncio.to_thread(views.directory.issue_key, tenant_id, actor=actor, **options)
        return await views.page(tenant_id, issued=issued.key, status_code=201)

    @post("/tenants/{tenant_id:str}/keys/{key_id:str}/revoke")
    async def revoke_key(
        self,
        tenant_id: FromPath[str],
        key_id: FromPath[str],
        console_admin: NamedDependency[Principal],
        views: NamedDependency[TenantViews],
    ) -> Template:
        actor = console_admin.actor("console")
        await asyncio.to_thread(views.directory.revoke_key, key_id, tenant_id=tenant_id, actor=actor)
        return await views.page(tenant_id, notice="Key revoked.")


def _signin(error: str | None = None, status_code: int = 200) -> Template:
    return page(
        "console/signin.html.jinja2",
        area="signin",
        status_code=status_code,
        error=error,
        heading="Admin sign-in",
        hint="Use the server's admin key (TESSERA_ADMIN_KEY) or a key issued with --admin.",
        key_label="Admin key",
        signin_action="/console/admin/signin",
    )


async def _tenants_page(directory: Directory, db: Engine, status_code: int = 200, **extra: Any) -> Template:
    rows = await asyncio.to_thread(directory.tenants)
    month = await asyncio.to_thread(month_by_tenant, db)
    return page(
        "console/admin/tenants.html.jinja2",
        area="admin",
        active="tenants",
        status_code=status_code,
        tenants=rows,
        month={t: {**m, "cost": money(m["cost_micros"])} for t, m in month.items()},
        **QUOTA_FORM,
        **extra,
    )
