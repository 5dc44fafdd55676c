"""The admin console's audit log page: admin changes, newest first, filtered and paged like `GET /admin/audit`."""

from __future__ import annotations

import asyncio

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import FromQuery
from litestar.response import Template
from sqlalchemy import Engine

from console.pages import page
from storage.audit import audit_page, entry_summary
from tenancy.directory import Principal

ACTIONS = ("tenant.create", "tenant.status", "quota.update", "key.issue", "key.revoke", "price.set")
PAGE = 50


class AuditConsoleController(Controller):
    path = "/console/admin"

    @get("/audit")
    async def audit(
        self,
        console_admin: NamedDependency[Principal],
        db: NamedDependency[Engine],
        action: FromQuery[str | None] = None,
        target: FromQuery[str | None] = None,
        actor: FromQuery[str | None] = None,
        before: FromQuery[int | None] = None,
    ) -> Template:
        found = await asyncio.to_thread(
            audit_page, db, action=action or None, target=target or None, actor=actor or None, before=before, limit=PAGE
        )
        return page(
            "console/admin/audit.html.jinja2",
            area="admin",
            active="audit",
            entries=[entry_summary(r) for r in found.rows],
            next_cursor=found.next_cursor,
            actions=ACTIONS,
            action=action,
            target=target,
            actor=actor,
        )
