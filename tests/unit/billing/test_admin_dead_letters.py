"""`GET /admin/billing/dead-letters`, through the real `create_app` over a migrated SQLite database, no engines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import Session

from config.settings import Settings
from db.models import BillingOutbox
from tenancy.directory import Directory
from tests.dbs import migrated
from tests.light_app import light_client

ADMIN_KEY = "sk-unit-admin"


@pytest.fixture
def db(tmp_path):
    yield from migrated("sqlite", tmp_path)


@pytest.fixture
def client(tmp_path, db):
    settings = Settings(data_dir=tmp_path, key_secret="unit-secret", admin_key=ADMIN_KEY, demo_tenant=None)
    directory = Directory(db, "unit-secret")

    with light_client(settings, db, directory) as test_client:
        yield test_client


def _outbox(db):
    now = datetime.now(UTC)

    def row(n, status, **extra):
        return BillingOutbox(
            identifier=f"r{n}:text_input",
            request_id=f"r{n}",
            tenant_id="t",
            dimension="text_input",
            quantity=n,
            status=status,
            **extra,
        )

    with Session(db) as s:
        s.add_all(
            [
                row(1, "dead", dead_at=now - timedelta(hours=1), dead_reason="older than Stripe's 35-day window"),
                row(2, "dead", dead_at=now, dead_reason="refused by Stripe: 400 parameter_invalid_integer", attempts=1),
                row(3, "sent"),
                row(4, "pending"),
            ]
        )
        s.commit()


def test_admins_see_dead_letters_newest_first_with_their_reasons(client, db):
    _outbox(db)
    body = client.get("/admin/billing/dead-letters", headers={"authorization": f"Bearer {ADMIN_KEY}"}).json()
    assert body["counts"] == {"pending": 1, "sent": 1, "dead": 2}
    assert [d["identifier"] for d in body["data"]] == ["r2:text_input", "r1:text_input"]
    assert body["data"][0]["reason"] == "refused by Stripe: 400 parameter_invalid_integer"
    assert (body["data"][0]["attempts"], body["data"][0]["quantity"], body["data"][0]["tenant_id"]) == (1, 2, "t")
    limited = client.get("/admin/billing/dead-letters?limit=1", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    assert [d["identifier"] for d in limited.json()["data"]] == ["r2:text_input"]


def test_dead_letters_are_for_admins_only(client, db):
    _outbox(db)
    assert client.get("/admin/billing/dead-letters").status_code == 401
    assert client.get("/admin/billing/dead-letters", headers={"authorization": "Bearer sk-nope"}).status_code == 401
    bad = client.get("/admin/billing/dead-letters?limit=0", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    assert bad.status_code == 400
