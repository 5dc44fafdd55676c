"""Console sessions: the cookie is written on sign-in and sign-out only, a sign-in ends after its lifetime however
busy it is, and signing out ends it on the server, so a copied cookie stops working."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from litestar.testing import TestClient
from sqlalchemy import func, select

from db.models import ConsoleSession
from tenancy.console_sessions import ConsoleSessions

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
HOURS = 12


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr("tenancy.console_sessions._utcnow", clock)
    return clock


def _session_cookies(response) -> list[str]:
    return [c for c in response.headers.get_list("set-cookie") if c.startswith("tessera_session")]


def _copy(console, source: TestClient) -> TestClient:
    """Another browser holding a copy of `source`'s session cookie."""
    thief = console()
    thief.cookies.set("tessera_session", source.cookies["tessera_session"], domain="console.test")
    return thief


def _signed_in(client: TestClient, path: str = "/console/playground") -> bool:
    response = client.get(path, follow_redirects=False)
    assert response.status_code in (200, 303), response.text
    return response.status_code == 200


def test_ordinary_responses_do_not_reissue_the_session_cookie(console, tenant_key, sign_in):
    client = console()
    signed = sign_in(client, tenant_key)
    [issued] = _session_cookies(signed)
    assert f"Max-Age={HOURS * 3600}" in issued
    for path in ("/console/playground", "/console/keys", "/console/requests", "/static/console.css"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert _session_cookies(response) == [], path


def test_a_sign_in_ends_after_its_lifetime_however_busy(console, tenant_key, sign_in, clock):
    client = console()
    assert sign_in(client, tenant_key).status_code == 303
    for hours in (1, 6, 11.99):
        clock.now = T0 + timedelta(hours=hours)
        assert _signed_in(client)
    clock.now = T0 + timedelta(hours=HOURS, seconds=1)
    refused = client.get("/console/playground", follow_redirects=False)
    assert refused.status_code == 303
    assert refused.headers["location"] == "/console/signin"
    # Signing in again starts a new lifetime.
    assert sign_in(client, tenant_key).status_code == 303
    clock.now = T0 + timedelta(hours=HOURS + 6)
    assert _signed_in(client)


def test_a_shorter_setting_applies_to_existing_sign_ins(console, tenant_key, sign_in, clock):
    client = console()
    assert sign_in(client, tenant_key).status_code == 303
    clock.now = T0 + timedelta(hours=2)
    assert _signed_in(client)
    shorter = console(console_session_hours=1)
    shorter.cookies.set("tessera_session", client.cookies["tessera_session"], domain="console.test")
    assert not _signed_in(shorter)


def test_a_copied_cookie_is_refused_after_sign_out(console, tenant_key, sign_in, post_form):
    browser = console()
    assert sign_in(browser, tenant_key).status_code == 303
    thief = _copy(console, browser)
    assert _signed_in(thief)
    out = post_form(browser, "/console/signout")
    assert out.status_code == 303
    assert out.headers["location"] == "/console/signin"
    assert not _signed_in(browser)
    assert not _signed_in(thief)


def test_admin_sign_out_ends_the_admin_session_and_keeps_the_tenant_one(
    console, tenant_key, admin_key, sign_in, post_form
):
    browser = console()
    assert sign_in(browser, tenant_key).status_code == 303
    assert sign_in(browser, admin_key, "/console/admin/signin").status_code == 303
    thief = _copy(console, browser)
    assert _signed_in(thief, "/console/admin/tenants")
    assert post_form(browser, "/console/admin/signout").status_code == 303
    assert not _signed_in(thief, "/console/admin/tenants")
    assert not _signed_in(browser, "/console/admin/tenants")
    assert _signed_in(browser)  # the tenant sign-in in the same browser is untouched


def test_signing_in_again_retires_the_previous_sign_in(console, tenant_key, sign_in):
    browser = console()
    assert sign_in(browser, tenant_key).status_code == 303
    before = _copy(console, browser)
    assert sign_in(browser, tenant_key).status_code == 303
    assert _signed_in(browser)
    assert not _signed_in(before)


def test_a_tenant_sign_in_is_not_an_admin_one(console, tenant_key, sign_in):
    browser = console()
    assert sign_in(browser, tenant_key).status_code == 303
    tenant_cookie = browser.cookies["tessera_session"]
    assert not _signed_in(browser, "/console/admin/tenants")
    assert browser.cookies["tessera_session"] == tenant_cookie


# -- the server-side record itself ----------------------------------------------------------------------------


def _rows(db) -> int:
    with db.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(ConsoleSession)).scalar_one())


def test_the_record_answers_by_kind_until_closed_or_expired(db):
    clock = Clock()
    sessions = ConsoleSessions(db, HOURS * 3600, clock=clock)
    tenant = sessions.open("tenant", "key-1")
    admin = sessions.open("admin", "static:abc")
    assert sessions.subject("tenant", tenant) == "key-1"
    assert sessions.subject("admin", admin) == "static:abc"
    assert sessions.subject("admin", tenant) is None  # an id answers only for its own kind
    assert sessions.subject("tenant", "made-up") is None
    clock.now = T0 + timedelta(hours=HOURS) - timedelta(microseconds=1)
    assert sessions.subject("tenant", tenant) == "key-1"
    clock.now = T0 + timedelta(hours=HOURS)
    assert sessions.subject("tenant", tenant) is None
    clock.now = T0
    sessions.close(admin)
    assert sessions.subject("admin", admin) is None
    with pytest.raises(ValueError, match="unknown console session kind"):
        sessions.open("root", "x")


def test_the_record_keeps_only_a_hash_and_sweeps_expired_rows(db):
    clock = Clock()
    sessions = ConsoleSessions(db, HOURS * 3600, clock=clock)
    first = sessions.open("tenant", "key-1")
    sessions.open("tenant", "key-2")
    assert _rows(db) == 2
    with db.connect() as conn:
        stored = conn.execute(select(ConsoleSession.id_hash)).scalars().all()  # type: ignore[call-overload]
    assert first not in stored
    clock.now = T0 + timedelta(hours=HOURS, minutes=1)
    sessions.open("tenant", "key-3")
    assert _rows(db) == 1
