"""The console as the real `create_app` builds it (middleware, headers, sessions, CSRF), over a migrated SQLite
database, with in-process limits and live metrics but without engines: the pages these tests visit need none."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from litestar.testing import TestClient

from api.auth import Authenticator
from config.settings import Settings
from serving.metrics import ServerMetrics
from serving.pools import PoolRegistry
from storage.blobs import BlobStore
from storage.responses import ResponseStore
from tenancy.directory import Directory
from tenancy.limits import InProcessLimiter
from tessera.app import create_app
from tessera.state import AppState
from tests.dbs import migrated

ADMIN_KEY = "sk-unit-admin"
SECRET = "unit-test-secret"


def from_peer(app: Any, host: str) -> Any:
    """The app as a client at `host` reaches it (Litestar's test client always says "testclient")."""

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope = {**scope, "client": (host, 40_000)}
        await app(scope, receive, send)

    return asgi


@pytest.fixture
def db(tmp_path):
    yield from migrated("sqlite", tmp_path)


@pytest.fixture
def directory(db) -> Directory:
    return Directory(db, SECRET)


@pytest.fixture
def admin_key() -> str:
    return ADMIN_KEY


@pytest.fixture
def tenant_key(directory) -> str:
    return directory.issue_key(directory.create_tenant("acme").id).key


@pytest.fixture
def console(tmp_path, db, directory) -> Iterator[Callable[..., TestClient[Any]]]:
    """`console(peer=None, base_url="http://console.test", **settings)`: a started test client."""
    clients: list[TestClient[Any]] = []

    def make(peer: str | None = None, base_url: str = "http://console.test", **overrides: Any) -> TestClient[Any]:
        settings = Settings(data_dir=tmp_path, key_secret=SECRET, admin_key=ADMIN_KEY, demo_tenant=None, **overrides)

        @asynccontextmanager
        async def light_state(s: Settings):  # type: ignore[no-untyped-def]
            yield AppState(
                settings=s,
                pools=PoolRegistry([]),
                service=None,  # type: ignore[arg-type]
                quotas=None,  # type: ignore[arg-type]
                metrics=ServerMetrics(),
                db=db,
                directory=directory,
                auth=Authenticator(directory, s.admin_key),
                demo_key=None,
                demo_key_new=False,
                prices=None,  # type: ignore[arg-type]
                limiter=InProcessLimiter(),
                stored_responses=ResponseStore(db, BlobStore(tmp_path / "files")),
            )

        app = create_app(settings, state_factory=light_state)
        client = TestClient(from_peer(app, peer) if peer else app, base_url=base_url)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def _sign_in(client: TestClient[Any], key: str, path: str = "/console/signin", **headers: str) -> Any:
    """Posts the sign-in form as a browser would (CSRF cookie and token), without following the redirect. Cookies
    are sent by hand: a Secure one would not travel back over the test client's plain http."""
    page = client.get(path, headers=headers)
    token = page.cookies.get("csrftoken") or client.cookies["csrftoken"]
    jar = {**dict(client.cookies.items()), "csrftoken": token}
    return client.post(
        path,
        data={"api_key": key, "_csrf_token": token},
        headers={**headers, "cookie": "; ".join(f"{k}={v}" for k, v in jar.items())},
        follow_redirects=False,
    )


def _post_form(client: TestClient[Any], path: str) -> Any:
    """A console form post (sign-out), with the browser's CSRF token."""
    return client.post(path, data={"_csrf_token": client.cookies["csrftoken"]}, follow_redirects=False)


@pytest.fixture
def sign_in() -> Callable[..., Any]:
    return _sign_in


@pytest.fixture
def post_form() -> Callable[..., Any]:
    return _post_form
