"""Stripe webhooks: signatures are checked and replays ignored."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from billing.stripe_meters import verify_webhook
from db.models import WebhookEvent


def receive(db: Engine, payload: bytes, signature: str | None, secret: str) -> tuple[str, Any]:
    """('accepted' | 'duplicate', event). Raises ValueError on a bad signature. Blocking."""
    event = verify_webhook(payload, signature, secret)
    with Session(db) as s:
        s.add(WebhookEvent(event_id=str(event["id"]), event_type=str(event["type"])))
        try:
            s.commit()
        except IntegrityError:
            return "duplicate", event
    return "accepted", event
