"""Console Batches page: a tenant uploads a JSONL of requests as a batch, watches each batch's progress (lines
done, failed and total, refreshed by HTMX while any batch is running), downloads the output and error files and
cancels. The same submit and cancel as `/v1/batches`; the admin overview lists every tenant's batches."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from litestar import Controller, Response, get, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath
from litestar.response import Template

from api.batches.protocol import ENDPOINTS
from api.batches.submit import cancel_batch, submit_batch
from api.errors import to_api_error
from config.settings import Settings
from console.pages import page
from jobs.runner import JobRunner
from serving.errors import TesseraError
from storage.batches import ENDED, BatchStore
from storage.files import FileStore
from tenancy.directory import Directory, Principal

SHOWN = 50  # batches on the page, newest first
DOWNLOADS = {"output": "output_file_id", "errors": "error_file_id"}


def batch_rows(listed: list[tuple[str, dict[str, Any]]], names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The batches as the table shows them: progress as done (answered or failed) of total."""
    rows = []
    for tenant_id, body in listed:
        counts = body.get("request_counts") or {}
        total, done, failed = counts.get("total", 0), counts.get("completed", 0), counts.get("failed", 0)
        rows.append(
            {
                **body,
                "tenant": (names or {}).get(tenant_id, tenant_id),
                "total": total,
                "done": done,
                "failed": failed,
                "percent": round(100 * (done + failed) / total) if total else 0,
                "active": body["status"] not in ENDED,
                "error_text": "; ".join(
                    f"line {e.get('line')}: {e.get('message')}" if e.get("line") else str(e.get("message"))
                    for e in ((body.get("errors") or {}).get("data") or [])[:5]
                ),
            }
        )
    return rows


async def _render(
    signed_in: Principal, batches: BatchStore | None, template: str, status_code: int = 200, **extra: Any
) -> Template:
    listed = [] if batches is None else await asyncio.to_thread(batches.recent, SHOWN, tenant_id=signed_in.tenant_id)
    rows = batch_rows(listed)
    return page(
        template,
        area="tenant",
        active="batches",
        status_code=status_code,
        tenant=signed_in.tenant_name,
        batches=rows,
        polling=any(r["active"] for r in rows),
        endpoints=ENDPOINTS,
        enabled=batches is not None,
        **extra,
    )


class BatchesController(Controller):
    path = "/console/batches"

    @get("/")
    async def batches_page(
        self, signed_in: NamedDependency[Principal], batches: NamedDependency[BatchStore | None]
    ) -> Template:
        return await _render(signed_in, batches, "console/batches.html.jinja2")

    @get("/list")
    async def batch_list(
        self, signed_in: NamedDependency[Principal], batches: NamedDependency[BatchStore | None]
    ) -> Template:
        return await _render(signed_in, batches, "console/_batches.html.jinja2")

    @post("/")
    async def upload(
        self,
        signed_in: NamedDependency[Principal],
        batches: NamedDependency[BatchStore | None],
        files: NamedDependency[FileStore | None],
        jobs: NamedDependency[JobRunner | None],
        settings: NamedDependency[Settings],
        data: Annotated[dict[str, Any], Body(media_type=RequestEncodingType.MULTI_PART)],
    ) -> Template:
        form = "console/batches.html.jinja2"
        if batches is None or files is None or jobs is None or signed_in.tenant_id is None:
            return await _render(signed_in, batches, form, status_code=404, error="This server runs no batches.")
        upload, endpoint = data.get("file"), str(data.get("endpoint") or "")
        if not isinstance(upload, UploadFile) or not upload.filename:
            return await _render(signed_in, batches, form, status_code=400, error="Choose a JSONL file to upload.")
        if endpoint not in ENDPOINTS:
            error = f"The endpoint must be one of {', '.join(ENDPOINTS)}."
            return await _render(signed_in, batches, form, status_code=400, error=error)
        content = await upload.read()
        if len(content) > settings.max_file_bytes:
            error = f"The file is larger than this server accepts ({settings.max_file_bytes:,} bytes)."
            return await _render(signed_in, batches, form, status_code=413, error=error)
        try:
            made = await asyncio.to_thread(
                lambda: files.create(
                    str(signed_in.tenant_id),
                    "batch",
                    upload.filename[:255],
                    content,
                    expires_days=settings.file_expiry_days,
                )
            )
            body = await submit_batch(
                batches,
                jobs,
                files,
                tenant_id=signed_in.tenant_id,
                key_id=signed_in.key_id,
                input_file_id=made.id,
                endpoint=endpoint,
                completion_window="24h",
            )
        except TesseraError as exc:
            return await _render(signed_in, batches, form, status_code=to_api_error(exc).status_code, error=exc.message)
        notice = f"Batch {body['id']} submitted from {upload.filename}: its lines are being checked."
        return await _render(signed_in, batches, form, status_code=201, notice=notice)

    @post("/{batch_id:str}/cancel")
    async def cancel(
        self,
        batch_id: FromPath[str],
        signed_in: NamedDependency[Principal],
        batches: NamedDependency[BatchStore | None],
        jobs: NamedDependency[JobRunner | None],
    ) -> Template:
        form = "console/batches.html.jinja2"
        if batches is None or jobs is None or signed_in.tenant_id is None:
            return await _render(signed_in, batches, form, status_code=404, error="This server runs no batches.")
        try:
            body = await cancel_batch(batches, jobs, signed_in.tenant_id, batch_id)
        except TesseraError as exc:
            return await _render(signed_in, batches, form, status_code=to_api_error(exc).status_code, error=exc.message)
        return await _render(signed_in, batches, form, notice=f"Batch {batch_id} is {body['status']}.")

    @get("/{batch_id:str}/{which:str}")
    async def download(
        self,
        batch_id: FromPath[str],
        which: FromPath[str],
        signed_in: NamedDependency[Principal],
        batches: NamedDependency[BatchStore | None],
        files: NamedDependency[FileStore | None],
    ) -> Response[bytes]:
        missing = Response(b"No such file.", status_code=404, media_type="text/plain")
        if batches is None or files is None or signed_in.tenant_id is None or which not in DOWNLOADS:
            return missing
        try:
            batch = await asyncio.to_thread(batches.get, signed_in.tenant_id, batch_id)
            file_id = batch.body.get(DOWNLOADS[which])
            if not file_id:
                return missing
            content = await asyncio.to_thread(files.content, signed_in.tenant_id, file_id)
        except TesseraError:
            return missing
        return Response(
            content,
            media_type="application/jsonl",
            headers={
                "content-disposition": f'attachment; filename="{batch_id}_{which}.jsonl"',
                "cache-control": "no-store",
            },
        )


async def admin_batches(batches: BatchStore | None, directory: Directory) -> dict[str, Any]:
    """Every tenant's newest batches, as the admin overview's batch table takes them."""
    rows: list[dict[str, Any]] = []
    if batches is not None:
        listed = await asyncio.to_thread(batches.recent, 20)
        names = {t.id: t.name for t, _ in await asyncio.to_thread(directory.tenants)}
        rows = batch_rows(listed, names)
    active = any(r["active"] for r in rows)
    return {"batches": rows, "polling": active, "admin_view": True, "list_url": "/console/admin/batches"}
