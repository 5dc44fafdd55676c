"""Billing on the live server: per-modality meter events reach Stripe (a local stand-in) and match usage."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import stripe

from tests import media, openai_wire
from tests.conftest import ADMIN_KEY, STRIPE_WEBHOOK_SECRET

ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


def _wait(predicate, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return False


def test_meter_events_equal_the_usage_records(server, fake_stripe):
    tenant = httpx.post(
        server.base_url + "/admin/tenants", headers=ADMIN, json={"name": f"billed-{uuid.uuid4().hex[:6]}"}
    ).json()
    key = httpx.post(f"{server.base_url}/admin/tenants/{tenant['id']}/keys", headers=ADMIN, json={}).json()["key"]
    auth = {"authorization": f"Bearer {key}"}
    image = {"type": "image_url", "image_url": {"url": media.png_data_url(301)}}
    receipts = []
    for parts in (
        [{"type": "text", "text": "one"}],
        [{"type": "text", "text": "two"}, image],
        [{"type": "text", "text": "three"}, image],
    ):
        resp = openai_wire.post(
            server.v1 + "/chat/completions",
            headers=auth,
            timeout=60,
            json={"model": "small", "messages": [{"role": "user", "content": parts}], "max_tokens": 4},
        )
        assert resp.status_code == 200, resp.text
        receipts.append(resp.json()["id"])

    def customer():
        return next(
            (c["id"] for c in fake_stripe.customers if c.get("metadata", {}).get("tessera_tenant_id") == tenant["id"]),
            None,
        )

    def billed() -> dict[str, int]:
        cid = customer()
        totals: dict[str, int] = {}
        for event in list(fake_stripe.events.values()):
            if event["payload"]["stripe_customer_id"] == cid:
                totals[event["event_name"]] = totals.get(event["event_name"], 0) + int(event["payload"]["value"])
        return totals

    usage = [httpx.get(f"{server.v1}/usage/{rid}", headers=auth).json() for rid in receipts]
    expected = {
        "tessera_text_input_tokens": sum(u["tokens"]["text"] for u in usage),
        "tessera_image_tokens": sum(u["tokens"]["image"] - u["tokens"]["cached_image"] for u in usage),
        "tessera_cached_media_tokens": sum(u["tokens"]["cached_image"] for u in usage),
        "tessera_output_tokens": sum(u["tokens"]["output"] for u in usage),
    }
    assert expected["tessera_cached_media_tokens"] == 54  # the second request hit the embedding cache
    assert all(u["cost_micros"] > 0 for u in usage)
    assert _wait(lambda: billed() == expected), (billed(), expected)


def test_webhook_checks_signatures_and_ignores_replays(server):
    payload = json.dumps(
        {"id": f"evt_{uuid.uuid4().hex}", "object": "event", "type": "invoice.paid", "data": {"object": {}}}
    )
    ts = int(time.time())
    sig = stripe.WebhookSignature._compute_signature(f"{ts}.{payload}", STRIPE_WEBHOOK_SECRET)
    url = server.v1 + "/billing/webhooks/stripe"
    first = httpx.post(url, content=payload, headers={"stripe-signature": f"t={ts},v1={sig}"})
    assert first.json()["outcome"] == "accepted"
    again = httpx.post(url, content=payload, headers={"stripe-signature": f"t={ts},v1={sig}"})
    assert again.json()["outcome"] == "duplicate"
    forged = httpx.post(url, content=payload, headers={"stripe-signature": f"t={ts},v1={'0' * 64}"})
    assert forged.status_code == 400
    assert forged.json()["error"]["code"] == "invalid_signature"
