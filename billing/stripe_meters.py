"""The only module that talks to Stripe: billing meters, customers and meter events, through the SDK."""

from __future__ import annotations

import logging
from typing import Any

import stripe

from billing.prices import DIMENSIONS

logger = logging.getLogger(__name__)

EVENT_NAMES = {d: f"tessera_{d}_tokens" for d in DIMENSIONS}


class StripeMeters:
    def __init__(self, api_key: str, api_base: str | None = None) -> None:
        kwargs: dict[str, Any] = {"max_network_retries": 0}
        if api_base:
            kwargs["base_addresses"] = {"api": api_base}
        self._client = stripe.StripeClient(api_key, **kwargs)
        self._meters_ready = False

    def ensure_meters(self) -> None:
        """One Billing Meter per billable dimension, summed."""
        if self._meters_ready:
            return
        existing = {m.event_name for m in self._client.v1.billing.meters.list(params={"limit": 100}).data}
        for dim, event in EVENT_NAMES.items():
            if event not in existing:
                self._client.v1.billing.meters.create(
                    params={
                        "display_name": f"Tessera {dim.replace('_', ' ')} tokens",
                        "event_name": event,
                        "default_aggregation": {"formula": "sum"},
                        "customer_mapping": {"event_payload_key": "stripe_customer_id", "type": "by_id"},
                    }
                )
        self._meters_ready = True

    def create_customer(self, tenant_id: str, name: str | None) -> str:
        customer = self._client.v1.customers.create(
            params={"name": name or tenant_id, "metadata": {"tessera_tenant_id": tenant_id}}
        )
        return str(customer.id)

    def send(self, identifier: str, dimension: str, customer_id: str, quantity: int, timestamp: int) -> None:
        """Send one meter event; an identifier Stripe has already seen counts as sent."""
        try:
            self._client.v1.billing.meter_events.create(
                params={
                    "event_name": EVENT_NAMES[dimension],
                    "identifier": identifier,
                    "timestamp": timestamp,
                    "payload": {"stripe_customer_id": customer_id, "value": str(quantity)},
                }
            )
        except stripe.InvalidRequestError as exc:
            if exc.code == "resource_already_exists" or "already exists" in str(exc.user_message or ""):
                logger.info("meter event %s was already recorded by Stripe", identifier)
                return
            raise


def verify_webhook(payload: bytes, signature: str | None, secret: str) -> Any:
    """The event, if the signature is valid and fresh; raises ValueError otherwise."""
    try:
        return stripe.Webhook.construct_event(payload, signature, secret)
    except (stripe.SignatureVerificationError, ValueError) as exc:
        raise ValueError(f"invalid Stripe webhook: {exc}") from exc


StripeError = stripe.StripeError
