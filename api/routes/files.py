"""POST, GET /v1/files; GET, DELETE /v1/files/{id}; GET /v1/files/{id}/content: a tenant's uploaded files."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from litestar import Response, delete, get, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, FromQuery

from api.auth import tenant_of
from api.files.protocol import PURPOSES, FileDeleted, FileList, FileObject
from api.openapi import answer, errors
from config.settings import Settings
from serving.errors import InvalidRequest, NotFound, PayloadTooLarge
from storage.files import FileStore
from tenancy.directory import Principal


def _files(files: FileStore | None) -> FileStore:
    if files is None:
        raise NotFound("this server keeps no files", param="file_id")
    return files


@post(
    "/v1/files",
    status_code=200,
    responses={**answer(FileObject, "The uploaded file."), **errors(400, 401, 413, 429)},
)
async def upload_file(
    data: Annotated[dict[str, Any], Body(media_type=RequestEncodingType.MULTI_PART)],
    principal: NamedDependency[Principal],
    files: NamedDependency[FileStore | None],
    settings: NamedDependency[Settings],
) -> FileObject:
    store = _files(files)
    purpose = str(data.get("purpose") or "")
    if purpose not in PURPOSES:
        raise InvalidRequest(f"purpose must be one of {', '.join(PURPOSES)}; got {purpose!r}", param="purpose")
    upload = data.get("file")
    if not isinstance(upload, UploadFile):
        raise InvalidRequest("the form has no `file` part", param="file", code="missing_field")
    content = await upload.read(settings.max_file_bytes + 1)
    if len(content) > settings.max_file_bytes:
        raise PayloadTooLarge(f"a file may hold at most {settings.max_file_bytes} bytes", param="file")
    row = await asyncio.to_thread(
        store.create,
        tenant_of(principal, "files"),
        purpose,
        upload.filename or "upload.jsonl",
        content,
        expires_days=settings.file_expiry_days,
    )
    return FileObject.of(row)


@get("/v1/files", responses={**answer(FileList, "A page of the tenant's files."), **errors(400, 401, 429)})
async def list_files(
    principal: NamedDependency[Principal],
    files: NamedDependency[FileStore | None],
    purpose: FromQuery[str | None] = None,
    after: FromQuery[str | None] = None,
    limit: FromQuery[int] = 10_000,
    order: FromQuery[str] = "desc",
) -> FileList:
    found = await asyncio.to_thread(
        _files(files).page, tenant_of(principal, "files"), purpose=purpose, after=after, limit=limit, order=order
    )
    data = [FileObject.of(row) for row in found.data]
    return FileList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=found.has_more,
    )


@get("/v1/files/{file_id:str}", responses={**answer(FileObject, "The file."), **errors(400, 401, 404, 429)})
async def retrieve_file(
    file_id: FromPath[str], principal: NamedDependency[Principal], files: NamedDependency[FileStore | None]
) -> FileObject:
    return FileObject.of(await asyncio.to_thread(_files(files).get, tenant_of(principal, "files"), file_id))


@get(
    "/v1/files/{file_id:str}/content",
    media_type="application/octet-stream",
    responses=errors(400, 401, 404, 429),
)
async def file_content(
    file_id: FromPath[str], principal: NamedDependency[Principal], files: NamedDependency[FileStore | None]
) -> Response[bytes]:
    content = await asyncio.to_thread(_files(files).content, tenant_of(principal, "files"), file_id)
    return Response(content, media_type="application/octet-stream")


@delete(
    "/v1/files/{file_id:str}",
    status_code=200,
    responses={**answer(FileDeleted, "The file is gone."), **errors(400, 401, 404, 429)},
)
async def delete_file(
    file_id: FromPath[str], principal: NamedDependency[Principal], files: NamedDependency[FileStore | None]
) -> FileDeleted:
    await asyncio.to_thread(_files(files).delete, tenant_of(principal, "files"), file_id)
    return FileDeleted(id=file_id)
