"""The audit log on SQLite and PostgreSQL: each admin change writes one row with who, what, the target and the
values before and after, in the change's own transaction (a refused change leaves none); never a key's secret or
hash; newest first, filtered and paged by cursor."""

from __future__ import annotations

import pytest

from billing.prices import PriceBook
from db.audit import audit_page
from serving.errors import InvalidRequest, NotFound
from tenancy.directory import Directory
from tests.dbs import migrated

WHO = "api:sk-tsr-0badc0de"


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    yield from migrated(request.param, tmp_path)


def _rows(db, **filters):
    return [(r.actor, r.action, r.target, r.before, r.after) for r in audit_page(db, **filters).rows]


def test_each_change_writes_who_what_before_and_after(db):
    d = Directory(db, "secret")
    acme = d.create_tenant("acme", tokens_per_minute=500, actor=WHO)
    d.set_quota(acme.id, actor=WHO, tokens_per_minute=900, grounding_policy="block")
    d.set_quota(acme.id, actor=WHO, tokens_per_minute=900)  # no change: no row
    d.set_status(acme.id, "suspended", actor="console:sk-tsr-12345678")
    issued = d.issue_key(acme.id, name="ci", allowed_models=["small"], actor=WHO)
    d.revoke_key(issued.key_id, actor=WHO)
    d.revoke_key(issued.key_id, actor=WHO)  # already revoked: nothing changes, no row
    PriceBook(db).set("small", "image", 1_000_000, actor="cli:ops@host")
    rows = _rows(db)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("cli:ops@host", "price.set", "small/image"),
        (WHO, "key.revoke", issued.key_id),
        (WHO, "key.issue", issued.key_id),
        ("console:sk-tsr-12345678", "tenant.status", acme.id),
        (WHO, "quota.update", acme.id),
        (WHO, "tenant.create", acme.id),
    ]
    price, revoke, issue, status, quota, create = rows
    assert price[3] == {"value": 300_000, "default": True}
    assert price[4] == {"value": 1_000_000}
    assert revoke[3] == {"revoked_at": None}
    assert revoke[4]["revoked_at"]
    assert issue[3] is None
    assert issue[4]["prefix"] == issued.prefix
    assert issue[4]["allowed_models"] == "small"
    assert issued.key not in str(issue)
    assert d.hash_key(issued.key) not in str(issue)
    assert (status[3], status[4]) == ({"status": "active"}, {"status": "suspended"})
    assert quota[3] == {"tokens_per_minute": 500, "grounding_policy": "score"}
    assert quota[4] == {"tokens_per_minute": 900, "grounding_policy": "block"}
    assert create[4]["name"] == "acme"
    assert create[4]["tokens_per_minute"] == 500


def test_a_refused_change_leaves_no_row(db):
    d = Directory(db, "secret")
    acme = d.create_tenant("acme", actor=WHO)
    with pytest.raises(InvalidRequest):
        d.set_quota(acme.id, actor=WHO, tokens_per_minute=-5)
    with pytest.raises(NotFound):
        d.revoke_key("no-such-key", actor=WHO)
    with pytest.raises(ValueError):
        PriceBook(db).set("small", "batch_percent", 150, actor=WHO)
    assert [r[1] for r in _rows(db)] == ["tenant.create"]


def test_filters_and_cursor_pages(db):
    d = Directory(db, "secret")
    tenants = [d.create_tenant(f"t{i}", actor=f"api:k{i % 2}") for i in range(5)]
    for t in tenants:
        d.set_quota(t.id, actor="api:k0", tokens_per_minute=7)
    assert len(_rows(db, action="quota")) == 5  # an action family
    assert len(_rows(db, action="quota.update", actor="api:k0")) == 5
    assert len(_rows(db, actor="api:k1")) == 2
    assert [r[1] for r in _rows(db, target=tenants[0].id)] == ["quota.update", "tenant.create"]
    first = audit_page(db, limit=4)
    second = audit_page(db, limit=4, before=first.next_cursor)
    third = audit_page(db, limit=4, before=second.next_cursor)
    assert (len(first.rows), len(second.rows), len(third.rows)) == (4, 4, 2)
    assert third.next_cursor is None
    ids = [r.id for r in first.rows + second.rows + third.rows]
    assert ids == sorted(ids, reverse=True)
    assert len(set(ids)) == 10
