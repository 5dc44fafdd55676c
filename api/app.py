"""The app factory: `create_app(settings)` is the only place the server is assembled."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, Request, Router
from litestar.di import Provide

from api.errors import EXCEPTION_HANDLERS
from api.routes.admin import AdminController
from api.routes.billing import PriceController, stripe_webhook
from api.routes.chat import create_chat_completion
from api.routes.models import list_models, retrieve_model
from api.routes.ops import health, metrics
from api.routes.usage import usage_receipt, usage_summary
from api.settings import Settings
from api.state import AppState, build_state
from tenancy.directory import Principal

logger = logging.getLogger(__name__)


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


def create_app(settings: Settings, on_ready: Callable[[AppState], None] | None = None) -> Litestar:
    slot = _StateSlot()

    @asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        async with build_state(settings) as state:
            slot.set(state)
            if on_ready is not None:
                on_ready(state)
            try:
                yield
            finally:
                slot.set(None)

    async def principal(request: Request[Any, Any, Any]) -> Principal:
        return await slot.get().auth.principal(request)

    async def admin(request: Request[Any, Any, Any]) -> Principal:
        return await slot.get().auth.admin(request)

    api = Router(
        path="/",
        route_handlers=[create_chat_completion, list_models, retrieve_model, usage_receipt, usage_summary],
        dependencies={"principal": Provide(principal)},
    )
    admin_api = Router(
        path="/", route_handlers=[AdminController, PriceController], dependencies={"admin": Provide(admin)}
    )
    return Litestar(
        route_handlers=[api, admin_api, health, metrics, stripe_webhook],
        lifespan=[lifespan],
        dependencies={
            "chat": slot.provider(lambda s: s.chat),
            "pools": slot.provider(lambda s: s.pools),
            "server_metrics": slot.provider(lambda s: s.metrics),
            "directory": slot.provider(lambda s: s.directory),
            "db": slot.provider(lambda s: s.db),
            "prices": slot.provider(lambda s: s.prices),
            "settings": slot.provider(lambda s: s.settings),
        },
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        request_max_body_size=settings.max_body_bytes,
        openapi_config=None,
        logging_config=None,
    )
