"""The app factory: `create_app(settings)` is the only place the server is assembled."""

from __future__ import annotations

import functools
import gc
import hashlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from litestar import Litestar, Request, Router
from litestar.config.compression import CompressionConfig
from litestar.config.csrf import CSRFConfig
from litestar.connection import ASGIConnection
from litestar.di import Provide
from litestar.handlers.base import BaseRouteHandler
from litestar.plugins.htmx import HTMXPlugin
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from litestar.template.config import TemplateConfig

from api.openapi import PRECHECK, SECURED, openapi_config
from api.parsing import JsonRequest, refuse_nul_in_path
from api.routes.admin import AdminController
from api.routes.audio import create_transcription, create_translation
from api.routes.batches import cancel_batch, create_batch, list_batches, retrieve_batch
from api.routes.billing import BillingAdminController, PriceController, stripe_webhook
from api.routes.chat import create_chat_completion
from api.routes.conversations import CONVERSATION_ROUTES
from api.routes.embeddings import create_embedding
from api.routes.files import delete_file, file_content, list_files, retrieve_file, upload_file
from api.routes.models import list_models, retrieve_model
from api.routes.ops import health, metrics
from api.routes.responses import (
    cancel_response,
    create_response,
    delete_response,
    list_input_items,
    retrieve_response,
)
from api.routes.usage import usage_receipt, usage_summary
from api.tracing import trace_requests
from config.settings import Settings
from console.admin import AdminConsoleController
from console.audit import AuditConsoleController
from console.auth import admin_principal, tenant_principal
from console.batches import BatchesController
from console.controllers import ConsoleController
from console.conversations import ConversationsController
from console.errors import console_error
from console.keys import KeysController
from console.playground_tasks import PlaygroundTasksController
from console.prices import AdminPricesController
from console.requests import RequestsController
from console.security import TrustedProxies, security_headers
from console.sessions import session_middleware
from console.usage import UsageController
from tenancy.console_sessions import ConsoleSessions
from tenancy.directory import Principal
from tenancy.quotas import QuotaGate
from tessera.pools import CheckpointResolver
from tessera.state import AppState, build_state, console_secret

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent


class _StateSlot:
    """Holds the state the lifespan builds; handlers reach it only through the providers below."""

    def __init__(self) -> None:
        self._state: AppState | None = None

    def set(self, state: AppState | None) -> None:
        self._state = state

    def get(self) -> AppState:
        if self._state is None:
            raise RuntimeError("the application is not started")
        return self._state

    def provider(self, pick: Callable[[AppState], Any]) -> Provide:
        return Provide(lambda: pick(self.get()), sync_to_thread=False)


def _version() -> str:
    try:
        return metadata.version("tessera")
    except metadata.PackageNotFoundError:
        return "0+unknown"


StateFactory = Callable[[Settings], AbstractAsyncContextManager[AppState]]


ADMIN_CONSOLE = "/console/admin"


def create_app(
    settings: Settings,
    on_ready: Callable[[AppState], None] | None = None,
    *,
    checkpoints: CheckpointResolver | None = None,
    state_factory: StateFactory | None = None,
) -> Litestar:
    """The server. `state_factory` builds what the lifespan holds: engines and all by default (`build_state`, with
    `checkpoints` resolving the pools that name no checkpoint); tests of the HTTP surface alone pass a lighter one."""
    if state_factory is None:
        state_factory = functools.partial(build_state, checkpoints=checkpoints)
    slot = _StateSlot()
    proxies = TrustedProxies.parse(settings.trusted_proxies)
    session_lifetime_s = settings.console_session_hours * 3600

    @asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        async with state_factory(settings) as state:
            slot.set(state)
            # Everything built at start-up (vLLM, transformers, the engines' processors: about 700k objects) lives as
            # long as the server; frozen out of the collector, a full collection scans only what requests allocate,
            # instead of stalling the event loop for 0.4 s (measured) in the middle of traffic.
            gc.collect()
            gc.freeze()
            if on_ready is not None:
                on_ready(state)
            try:
                yield
            finally:
                slot.set(None)

    async def principal(request: Request[Any, Any, Any]) -> Principal:
        # `authenticated` has checked the key already; this second lookup is served from the directory's cache.
        return await slot.get().auth.principal(request)

    async def authenticated(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        # A guard runs before Litestar reads and parses the body: a caller without a valid key gets its 401
        # whatever it sent, and costs no parsing.
        await slot.get().auth.principal(connection)

    async def room_for_a_request(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
        # Before the body: a tenant with no request slot or token left gets its 429 without its megabytes being
        # read and parsed (serving checks again, for callers that come another way, such as the playground).
        state = slot.get()
        quotas: QuotaGate | None = state.quotas  # None in an engine-less app (the OpenAPI tests)
        if handler.opt.get(PRECHECK) and quotas is not None:
            await quotas.policy(await state.auth.principal(connection)).precheck()

    async def admin_only(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        await slot.get().auth.admin(connection)

    async def console_admin_only(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        # Every admin console page needs an admin sign-in, whatever its handler asks for; signing in and out do not.
        path = connection.scope["path"].rstrip("/")
        if not path.startswith(ADMIN_CONSOLE) or path in (ADMIN_CONSOLE + "/signin", ADMIN_CONSOLE + "/signout"):
            return
        state = slot.get()
        sessions = ConsoleSessions(state.db, session_lifetime_s)
        await admin_principal(connection, state.directory, state.auth, sessions)  # type: ignore[arg-type]

    api = Router(
        path="/",
        route_handlers=[
            create_chat_completion,
            create_embedding,
            create_response,
            retrieve_response,
            delete_response,
            list_input_items,
            cancel_response,
            *CONVERSATION_ROUTES,
            create_batch,
            retrieve_batch,
            list_batches,
            cancel_batch,
            list_models,
            retrieve_model,
            usage_receipt,
            usage_summary,
        ],
        dependencies={"principal": Provide(principal)},
        guards=[authenticated, refuse_nul_in_path, room_for_a_request],
        security=SECURED,
        tags=["openai"],
    )
    # Uploads get a body limit of their own: a batch input file is larger than any request.
    files_api = Router(
        path="/",
        route_handlers=[upload_file, list_files, retrieve_file, file_content, delete_file],
        dependencies={"principal": Provide(principal)},
        guards=[authenticated, refuse_nul_in_path, room_for_a_request],
        security=SECURED,
        tags=["openai"],
        request_max_body_size=settings.max_file_bytes + 1024 * 1024,  # the form's own parts on top of the file
    )
    # Audio files get a body limit of their own, as uploads do.
    audio_api = Router(
        path="/",
        route_handlers=[create_transcription, create_translation],
        dependencies={"principal": Provide(principal)},
        guards=[authenticated, refuse_nul_in_path, room_for_a_request],
        security=SECURED,
        tags=["openai"],
        request_max_body_size=settings.max_transcription_bytes + 1024 * 1024,
    )
    admin_api = Router(
        path="/",
        route_handlers=[AdminController, PriceController, BillingAdminController],
        dependencies={"principal": Provide(principal)},
        guards=[admin_only, refuse_nul_in_path],
        request_class=JsonRequest,
        security=SECURED,
        tags=["admin"],
    )
    # Pages for people, not part of the API's document.
    console = Router(
        path="/",
        route_handlers=[
            ConsoleController,
            PlaygroundTasksController,
            KeysController,
            BatchesController,
            ConversationsController,
            UsageController,
            RequestsController,
            AdminConsoleController,
            AdminPricesController,
            AuditConsoleController,
        ],
        guards=[console_admin_only],
        include_in_schema=False,
    )
    secret = hashlib.sha256(b"tessera-console:" + console_secret(settings).encode()).digest()
    sessions = session_middleware(secret[:16], session_lifetime_s, secure=settings.console_secure_cookies)
    csrf = CSRFConfig(
        secret=secret.hex(),
        cookie_httponly=False,
        cookie_samesite="lax",
        cookie_secure=settings.console_secure_cookies,
        # Anchored: the patterns are searched anywhere in the path, and "/admin" alone would also exempt the
        # admin console's forms under /console/admin.
        exclude=["^/v1/", "^/admin/", "^/health$", "^/metrics$", "^/static/"],
    )
    # Pages and assets are compressed; API responses are not, because gzip would hold back streamed tokens.
    compression = CompressionConfig(
        backend="gzip", minimum_size=1024, gzip_compress_level=6, exclude=["^/v1/", "^/console/playground/run$"]
    )
    return Litestar(
        route_handlers=[
            api,
            files_api,
            audio_api,
            admin_api,
            health,
            metrics,
            stripe_webhook,
            console,
            create_static_files_router(path="/static", directories=[ROOT / "static"]),
        ],
        middleware=[trace_requests, sessions],
        # Secure cookies and HSTS follow the request's transport; pages get the content security policy.
        before_send=[security_headers(proxies, always_secure_cookies=settings.console_secure_cookies)],
        csrf_config=csrf,
        compression_config=compression,
        template_config=TemplateConfig(directory=ROOT / "templates", engine=JinjaTemplateEngine),
        lifespan=[lifespan],
        dependencies={
            "service": slot.provider(lambda s: s.service),
            "quotas": slot.provider(lambda s: s.quotas),
            "pools": slot.provider(lambda s: s.pools),
            "server_metrics": slot.provider(lambda s: s.metrics),
            "directory": slot.provider(lambda s: s.directory),
            "db": slot.provider(lambda s: s.db),
            "prices": slot.provider(lambda s: s.prices),
            "settings": slot.provider(lambda s: s.settings),
            "auth": slot.provider(lambda s: s.auth),
            "limiter": slot.provider(lambda s: s.limiter),
            "cache": slot.provider(lambda s: s.cache),
            "grounding": slot.provider(lambda s: s.grounding),
            "stored_responses": slot.provider(lambda s: s.stored_responses),
            "conversations": slot.provider(lambda s: s.conversations),
            "jobs": slot.provider(lambda s: s.jobs),
            "files": slot.provider(lambda s: s.files),
            "batches": slot.provider(lambda s: s.batches),
            "task_service": slot.provider(lambda s: s.task_service),
            "transcriber": slot.provider(lambda s: s.transcriber),
            "console_sessions": slot.provider(lambda s: ConsoleSessions(s.db, session_lifetime_s)),
            "signed_in": Provide(tenant_principal),
            "console_admin": Provide(admin_principal),
        },
        plugins=[HTMXPlugin()],
        exception_handlers={Exception: console_error, HTTP_500_INTERNAL_SERVER_ERROR: console_error},
        request_max_body_size=settings.max_body_bytes,
        openapi_config=openapi_config(_version()),
        logging_config=None,
    )
