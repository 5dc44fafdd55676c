"""Answer quality in the console, through the real app: thumbs on an answer (plain form and HTMX, CSRF, only on the
tenant's own requests), the guardrail's flag on the log, receipt and breakdown, the usage page's passed share and
regeneration rate, the admin overview's quality tables and eval report, and the quota form's guardrail fields."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from html import unescape

import pytest
from sqlmodel import Session

from db.models import InferenceRequest, TenantQuota

FLAGGED = "flagged: below threshold"


def _row(request_id: str, tenant_id: str, **fields) -> InferenceRequest:
    return InferenceRequest(
        request_id=request_id,
        tenant_id=tenant_id,
        model_variant="small",
        modality_mask=fields.pop("mask", 3),
        status="completed",
        created_at=fields.pop("at", datetime.now(UTC)),
        **fields,
    )


def _add(db, *rows) -> None:
    with Session(db) as s:
        s.add_all(rows)
        s.commit()


def _feedback_of(db, request_id: str) -> int | None:
    with Session(db) as s:
        return s.get(InferenceRequest, request_id).feedback


def _text(html: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def _accessible_name(html: str) -> str:
    """The text a screen reader announces: without what is aria-hidden (the thumbs' emoji)."""
    return _text(re.sub(r'<span aria-hidden="true">.*?</span>', "", html)).strip()


@pytest.fixture
def acme(directory, tenant_key) -> str:
    return directory.resolve(tenant_key).tenant_id


@pytest.fixture
def tenant(console, tenant_key, sign_in):
    client = console()
    assert sign_in(client, tenant_key).status_code == 303
    return client


@pytest.fixture
def admin(console, admin_key, sign_in):
    client = console()
    assert sign_in(client, admin_key, "/console/admin/signin").status_code == 303
    return client


def test_thumbs_are_stored_on_the_tenants_own_answer_by_plain_form_and_by_htmx(db, directory, acme, tenant):
    other = directory.create_tenant("globex").id
    _add(db, _row("req-mine", acme), _row("req-theirs", other))
    token = tenant.cookies["csrftoken"]
    plain = tenant.post(
        "/console/requests/req-mine/feedback",
        data={"feedback": "up", "_csrf_token": token},
        follow_redirects=False,
    )
    assert (plain.status_code, plain.headers["location"]) == (303, "/console/requests/req-mine")
    assert _feedback_of(db, "req-mine") == 1
    receipt = tenant.get("/console/requests/req-mine").text
    assert "You rated this answer thumbs up." in receipt
    assert re.search(r'value="up" id="feedback-up-req-mine" class="thumb chosen"', receipt)

    # HTMX: the header token, the form swapped in place, a toast through HX-Trigger. Pressing again changes it.
    htmx = {"hx-request": "true", "x-csrftoken": token}
    swapped = tenant.post("/console/requests/req-mine/feedback", data={"feedback": "down"}, headers=htmx)
    assert swapped.status_code == 200, swapped.text
    assert _feedback_of(db, "req-mine") == -1
    assert swapped.text.lstrip().startswith('<form class="feedback" id="feedback-req-mine"')
    assert "You rated this answer thumbs down." in swapped.text
    assert "<html" not in swapped.text
    trigger = json.loads(swapped.headers["hx-trigger"])
    assert trigger == {"tessera:toast": {"message": "Thanks: marked as a bad answer."}}
    assert swapped.headers["cache-control"] == "no-store"

    # Another tenant's request is not found, and stays unrated; so is one that does not exist.
    for request_id in ("req-theirs", "req-missing"):
        refused = tenant.post(f"/console/requests/{request_id}/feedback", data={"feedback": "up"}, headers=htmx)
        assert refused.status_code == 404, request_id
    assert _feedback_of(db, "req-theirs") is None
    assert tenant.post("/console/requests/req-mine/feedback", data={"feedback": "meh"}, headers=htmx).status_code == 400
    # Without the CSRF token the post is refused and changes nothing.
    forged = tenant.post("/console/requests/req-mine/feedback", data={"feedback": "up"}, follow_redirects=False)
    assert forged.status_code == 403
    assert _feedback_of(db, "req-mine") == -1


def test_signed_out_feedback_is_sent_to_sign_in(console, db, acme):
    _add(db, _row("req-x", acme))
    client = console()
    client.get("/console/signin")
    response = client.post(
        "/console/requests/req-x/feedback",
        data={"feedback": "up", "_csrf_token": client.cookies["csrftoken"]},
        follow_redirects=False,
    )
    assert (response.status_code, response.headers["location"]) == (303, "/console/signin")
    assert _feedback_of(db, "req-x") is None


def test_a_flagged_answer_is_marked_in_words_on_the_log_the_receipt_and_the_breakdown(db, acme, tenant):
    now = datetime.now(UTC)
    claims = ["a red circle", "three squares"]
    _add(
        db,
        _row("req-flagged", acme, grounding_score=0.25, grounding_passed=False, grounding_unsupported=claims, at=now),
        _row("req-passed", acme, grounding_score=0.9, grounding_passed=True, feedback=1, at=now - timedelta(seconds=1)),
        _row("req-plain", acme, mask=1, at=now - timedelta(seconds=2)),
    )
    log = tenant.get("/console/requests").text
    rows = {
        m.group(1): m.group(0)
        for m in re.finditer(r'<tr[^>]*>(?:(?!</tr>).)*?requests/(req-[a-z]+)".*?</tr>', log, re.S)
    }
    assert set(rows) == {"req-flagged", "req-passed", "req-plain"}
    assert rows["req-flagged"].startswith('<tr class="flagged">')
    assert FLAGGED in _text(rows["req-flagged"])
    assert FLAGGED not in _text(rows["req-passed"])
    assert "flagged" not in rows["req-passed"].split(">")[0]
    assert "thumbs up" in _text(rows["req-passed"])
    assert re.search(r'data-field="grounding">—</td>\s*<td data-field="feedback">—</td>', rows["req-plain"])

    receipt = tenant.get("/console/requests/req-flagged").text
    assert '<section class="card flagged">' in receipt
    assert FLAGGED in _text(receipt)
    assert re.search(r'<ul class="claims"[^>]*><li>a red circle</li><li>three squares</li></ul>', receipt)
    assert "Not rated yet." in receipt
    assert FLAGGED not in _text(tenant.get("/console/requests/req-passed").text)

    breakdown = tenant.get("/console/requests/req-flagged/summary", headers={"hx-request": "true"}).text
    assert '<dl class="breakdown flagged">' in breakdown
    assert FLAGGED in _text(breakdown)
    assert "<li>a red circle</li>" in breakdown
    buttons = re.findall(r'<button type="submit" name="feedback" value="(up|down)"[^>]*>(.*?)</button>', breakdown)
    assert [(value, _accessible_name(label)) for value, label in buttons] == [
        ("up", "Thumbs up"),
        ("down", "Thumbs down"),
    ]
    assert 'name="_csrf_token"' in breakdown  # works as a plain form too
    passed = tenant.get("/console/requests/req-passed/summary").text
    assert "passed the threshold" in passed
    assert "breakdown flagged" not in passed


def test_a_receipt_names_what_each_judged_claims_probability_is_of(db, acme, tenant):
    """A yes/no question's support is P(yes); an open question's is the probability of the value the answer said."""
    checked = [
        {"claim": "a square", "evidence": "judge", "supported": True, "p_yes": 0.9, "form": "yes_no"},
        {"claim": "the square is red", "evidence": "judge", "supported": False, "p_yes": 0.04, "form": "open"},
        {"claim": "one shape", "evidence": "label_head", "supported": True},
    ]
    _add(db, _row("req-judged", acme, grounding_score=0.67, grounding_passed=False, grounding_checked=checked))
    table = _text(tenant.get("/console/requests/req-judged").text)
    assert "a square judge (P(yes) 0.90)" in table
    assert "the square is red judge (P(the value said) 0.04)" in table
    assert "one shape label_head yes" in table


def test_usage_shows_passed_share_and_regeneration_rate_per_mix(db, acme, tenant):
    now = datetime.now(UTC).replace(microsecond=0)
    _add(
        db,
        _row("u1", acme, mask=3, grounding_score=0.9, grounding_passed=True, prompt_fingerprint="f1", at=now),
        _row(
            "u2",
            acme,
            mask=3,
            grounding_score=0.2,
            grounding_passed=False,
            prompt_fingerprint="f1",
            at=now - timedelta(minutes=2),
        ),
        _row(
            "u3",
            acme,
            mask=3,
            grounding_score=0.8,
            grounding_passed=True,
            prompt_fingerprint="f2",
            at=now - timedelta(minutes=3),
        ),
        _row("u4", acme, mask=3, grounding_score=0.7, prompt_fingerprint="f3", at=now - timedelta(minutes=4)),
        _row("u5", acme, mask=1, prompt_fingerprint="t1", at=now - timedelta(minutes=10)),
    )
    page = tenant.get("/console/usage").text
    table = page[page.index('<table id="usage-grounding"') : page.index("</table>", page.index("usage-grounding"))]
    image = re.search(r'<tr data-mix="text\+image">(.*?)</tr>', table).group(1)
    assert re.search(r'data-field="passed">67% \(2 of 3\)<', image)
    assert re.search(r'data-field="regenerated">25% \(1 of 4\)<', image)
    text_only = re.search(r'<tr data-mix="text">(.*?)</tr>', table).group(1)  # no scores, but counted for repeats
    assert re.search(r'data-field="regenerated">0% \(0 of 1\)<', text_only)
    assert re.search(r'data-field="passed">—<', text_only)


def test_admin_overview_shows_quality_by_mix_and_kind_and_the_latest_eval(
    db, directory, acme, admin, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    other = directory.create_tenant("globex").id
    now = datetime.now(UTC)
    _add(
        db,
        _row("o1", acme, mask=5, grounding_score=0.9, grounding_passed=True, question_kind="who", feedback=1, at=now),
        _row(
            "o2",
            other,
            mask=5,
            grounding_score=0.1,
            grounding_passed=False,
            question_kind="who",
            feedback=-1,
            prompt_fingerprint="p",
            at=now - timedelta(minutes=1),
        ),
        _row("o3", other, mask=5, prompt_fingerprint="p", question_kind="when", at=now - timedelta(minutes=3)),
    )
    page = admin.get("/console/admin/").text
    assert 'id="live"' in page
    audio = re.search(r'<table id="quality-mix".*?<tr data-mix="text\+audio">(.*?)</tr>', page, re.S).group(1)
    assert re.search(r'data-field="passed">50% \(1 of 2\)<', audio)
    assert re.search(r'data-field="thumbs up">1<', audio)
    assert re.search(r'data-field="thumbs down">1<', audio)
    assert re.search(r'data-field="regenerated">50% \(1 of 2\)<', audio)
    who = re.search(r'<tr data-kind="who">(.*?)</tr>', page).group(1)
    assert re.search(r"<td>2</td><td>0.50</td>", who)
    assert 'data-kind="when"' not in page  # neither scored nor rated
    assert 'id="eval-missing"' in page
    assert "artifacts/eval/grounding.json" in page
    assert admin.get("/console/admin/eval/grounding.html").status_code == 404

    report = {
        "started_at": "2026-12-04T08:00:00Z",
        "set": "demo/golden/heldout.jsonl",
        "gate": {"model": "large", "passed": False, "failures": ["accuracy 0.81 < 0.9"]},
        "models": {
            "large": {
                "summary": {
                    "overall": {"items": 750, "accuracy": 0.81, "hallucination_rate": 0.031, "pope": {"accuracy": 0.9}},
                    "by_mix": {"image": {"items": 300, "accuracy": 0.95, "hallucination_rate": 0.02}},
                    "by_kind": {},
                }
            }
        },
    }
    (tmp_path / "artifacts" / "eval").mkdir(parents=True)
    (tmp_path / "artifacts" / "eval" / "grounding.json").write_text(json.dumps(report))
    page = admin.get("/console/admin/").text
    assert "failed" in _text(re.search(r'<p class="summary" id="eval-meta">.*?</p>', page).group(0))
    overall = re.search(r'<table class="eval" data-model="large">.*?<tr data-slice="overall">(.*?)</tr>', page, re.S)
    assert re.search(r'data-field="accuracy">81.0%<', overall.group(1))
    assert re.search(r'data-field="hallucination">3.1%<', overall.group(1))
    assert re.search(r'<tr data-slice="image">.*?data-field="accuracy">95.0%<', page)
    assert 'id="eval-html"' not in page  # no HTML report yet

    (tmp_path / "artifacts" / "eval" / "grounding.html").write_text("<!doctype html><style>b{}</style><b>report</b>")
    page = admin.get("/console/admin/").text
    assert 'href="/console/admin/eval/grounding.html"' in page
    served = admin.get("/console/admin/eval/grounding.html")
    assert served.status_code == 200
    assert "<b>report</b>" in served.text
    assert served.headers["content-type"].startswith("text/html")
    policy = served.headers["content-security-policy"]
    assert "sandbox" in policy
    assert "default-src 'none'" in policy
    assert "script-src" not in policy

    (tmp_path / "artifacts" / "eval" / "grounding.json").write_text("{not json")
    assert 'id="eval-error"' in admin.get("/console/admin/").text


def test_the_eval_report_is_for_admins_only(console, tenant, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "artifacts" / "eval").mkdir(parents=True)
    (tmp_path / "artifacts" / "eval" / "grounding.html").write_text("<p>secret figures</p>")
    for client in (console(), tenant):
        response = client.get("/console/admin/eval/grounding.html", follow_redirects=False)
        assert (response.status_code, response.headers["location"]) == (303, "/console/admin/signin")


def test_the_quota_form_saves_the_guardrail_policy_and_threshold(db, acme, admin):
    page = admin.get(f"/console/admin/tenants/{acme}").text
    select = re.search(r'<select id="q-guardrail" name="grounding_policy"[^>]*>(.*?)</select>', page).group(1)
    assert re.findall(r'<option value="(\w+)"', select) == ["off", "score", "flag", "block"]
    assert '<option value="score" selected>' in select
    threshold = re.search(r'<input id="q-threshold"[^>]*>', page).group(0)
    default = TenantQuota(tenant_id=acme).grounding_threshold
    assert (
        f'name="grounding_threshold" type="number" min="0" max="1" step="0.05" required value="{default}"' in threshold
    )
    form = {
        "tokens_per_minute": "5000",
        "concurrent_requests": "4",
        "grounding_policy": "block",
        "grounding_threshold": "0.65",
        "_csrf_token": admin.cookies["csrftoken"],
    }
    saved = admin.post(f"/console/admin/tenants/{acme}/quota", data=form)
    assert saved.status_code in {201, 200}, saved.text
    with Session(db) as s:
        quota = s.get(TenantQuota, acme)
        assert (quota.tokens_per_minute, quota.grounding_policy, quota.grounding_threshold) == (5000, "block", 0.65)
    assert '<option value="block" selected>' in saved.text
    for bad in ({"grounding_policy": "shout"}, {"grounding_threshold": "1.5"}, {"grounding_threshold": "nan"}):
        refused = admin.post(f"/console/admin/tenants/{acme}/quota", data={**form, **bad})
        assert refused.status_code == 400, bad
    with Session(db) as s:
        assert s.get(TenantQuota, acme).grounding_policy == "block"


def test_a_receipt_links_a_stored_response_to_its_conversation(db, acme, tenant, tmp_path):
    from storage.blobs import BlobStore
    from storage.responses import ResponseStore

    store = ResponseStore(db, BlobStore(tmp_path / "files"))
    previous = None
    for n in (1, 2, 3):
        _add(db, _row(f"req-{n}", acme))
        body = {"id": f"resp_{n}", "model": "small", "status": "completed", "output": []}
        store.save(
            tenant_id=acme,
            body=body,
            input_items=[],
            media={},
            request_id=f"req-{n}",
            retention_days=30,
            previous_response_id=previous,
        )
        previous = f"resp_{n}"
    page = tenant.get("/console/requests/req-2").text
    section = page[page.index('id="conversation"') :]
    assert 'href="/console/requests/req-1"><code>resp_1</code>' in section
    assert "<strong><code>resp_2</code></strong> (this request)" in section
    assert _text(section.split("Continued by:")[1]).startswith(" resp_3")
    assert 'href="/console/requests/req-3"' in section
    first = tenant.get("/console/requests/req-1").text
    assert 'Continued by: <a href="/console/requests/req-2"><code>resp_2</code>' in re.sub(r"\s+", " ", first)
