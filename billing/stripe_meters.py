"""The only module that talks to Stripe: billing meters, customers and meter events, through the SDK.

Every call is async (the SDK's httpx client), so the event loop is never blocked on Stripe, and every POST
carries an idempotency key the caller derives from its own data, so a retry is never a second operation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import stripe

from billing.outbox_policy import (
    Failure,
    customer_idempotency_key,
    meter_definition_idempotency_key,
)
from billing.prices import BATCH_DIMENSIONS, DIMENSIONS

logger = logging.getLogger(__name__)

T = TypeVar("T")

EVENT_NAMES = {
    d: f"tessera_{d}" if d.endswith("_seconds") else f"tessera_{d}_tokens" for d in (*DIMENSIONS, *BATCH_DIMENSIONS)
}


class StripeFailure(Exception):
    """A Stripe call that did not succeed, reduced to what decides whether it is retried."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"{failure.status or 'no answer'} {failure.code or ''}: {failure.message}".strip())
        self.failure = failure


@dataclass(frozen=True)
class MeterEvent:
    identifier: str  # Stripe counts one event per identifier
    dimension: str
    customer_id: str
    quantity: int
    timestamp: int  # seconds since the epoch: when the usage happened, not when it is sent


def _failure(exc: stripe.StripeError) -> StripeFailure:
    should_retry = (exc.headers or {}).get("stripe-should-retry")
    return StripeFailure(
        Failure(
            status=exc.http_status,
            code=exc.code,
            error_type=exc.error.type if exc.error is not None else None,
            should_retry=None if should_retry is None else should_retry == "true",
            message=str(exc.user_message or exc)[:300],
        )
    )


class StripeMeters:
    def __init__(self, api_key: str, api_base: str | None = None, *, timeout_s: float = 10.0) -> None:
        kwargs: dict[str, Any] = {"max_network_retries": 0}  # the outbox retries, per row, with its own backoff
        if api_base:
            kwargs["base_addresses"] = {"api": api_base}
        self._http = stripe.HTTPXClient(timeout=timeout_s)
        self._client = stripe.StripeClient(api_key, http_client=self._http, **kwargs)
        self.timeout_s = timeout_s
        self._meters_ready = False

    async def ensure_meters(self) -> None:
        """One Billing Meter per billable dimension, summed. Replicas racing here create each meter once."""
        if self._meters_ready:
            return
        listed = await self._call(self._client.v1.billing.meters.list_async(params={"limit": 100}))
        existing = {m.event_name for m in listed.data}
        for dim, event in EVENT_NAMES.items():
            if event not in existing:
                await self._call(
                    self._client.v1.billing.meters.create_async(
                        params={
                            "display_name": f"Tessera {dim.replace('_', ' ')} tokens",
                            "event_name": event,
                            "default_aggregation": {"formula": "sum"},
                            "customer_mapping": {"event_payload_key": "stripe_customer_id", "type": "by_id"},
                        },
                        options={"idempotency_key": meter_definition_idempotency_key(event)},
                    )
                )
        self._meters_ready = True

    async def create_customer(self, tenant_id: str, name: str | None) -> str:
        """The tenant's Stripe customer; a retry (or a second replica) within Stripe's 24 h gets the same one."""
        customer = await self._call(
            self._client.v1.customers.create_async(
                params={"name": name or tenant_id, "metadata": {"tessera_tenant_id": tenant_id}},
                options={"idempotency_key": customer_idempotency_key(tenant_id)},
            )
        )
        return str(customer.id)

    async def send(self, event: MeterEvent, idempotency_key: str) -> None:
        """Send one meter event; raises StripeFailure, whose verdict (outbox_policy.classify) the caller acts on."""
        await self._call(
            self._client.v1.billing.meter_events.create_async(
                params={
                    "event_name": EVENT_NAMES[event.dimension],
                    "identifier": event.identifier,
                    "timestamp": event.timestamp,
                    "payload": {"stripe_customer_id": event.customer_id, "value": str(event.quantity)},
                },
                options={"idempotency_key": idempotency_key},
            )
        )

    async def _call(self, request: Awaitable[T]) -> T:
        try:
            # httpx's timeout bounds each phase of a request; this bounds the whole call, which leases rely on.
            async with asyncio.timeout(self.timeout_s):
                return await request
        except stripe.StripeError as exc:
            raise _failure(exc) from exc
        except TimeoutError as exc:
            raise StripeFailure(Failure(status=None, message=f"no answer within {self.timeout_s} s")) from exc

    async def aclose(self) -> None:
        await self._http.close_async()


def verify_webhook(payload: bytes, signature: str | None, secret: str) -> Any:
    """The event, if the signature is valid and fresh; raises ValueError otherwise."""
    try:
        return stripe.Webhook.construct_event(payload, signature, secret)
    except (stripe.SignatureVerificationError, ValueError) as exc:
        raise ValueError(f"invalid Stripe webhook: {exc}") from exc
