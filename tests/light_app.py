"""The real `create_app` over a database and a directory, with no engines, pools or limits: for tests of the HTTP
edge (routes, the OpenAPI document, admin endpoints) that need no model."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from litestar.testing import TestClient

from api.auth import Authenticator
from config.settings import Settings
from serving.pools import PoolRegistry
from tenancy.directory import Directory
from tessera.app import create_app
from tessera.state import AppState


@contextmanager
def light_client(settings: Settings, db: Any, directory: Directory) -> Iterator[TestClient[Any]]:
    @asynccontextmanager
    async def light_state(s: Settings):
        yield AppState(
            settings=s,
            pools=PoolRegistry([]),
            service=None,
            quotas=None,
            metrics=None,
            db=db,
            directory=directory,
            auth=Authenticator(directory, s.admin_key),
            demo_key=None,
            demo_key_new=False,
            prices=None,
            limiter=None,
        )

    with TestClient(create_app(settings, state_factory=light_state)) as test_client:
        yield test_client
