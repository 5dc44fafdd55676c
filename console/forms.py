"""The admin console's form fields, validated with the form's own labels: whole numbers, amounts of money and the
tenant quota form, guardrail and stored responses included."""

from __future__ import annotations

import math
from typing import Any

from serving.errors import InvalidRequest
from serving.routing import ROUTING_POLICIES
from tenancy.directory import GROUNDING_EVIDENCE, GROUNDING_POLICIES, MAX_RETENTION_DAYS

THRESHOLD_STEP = 0.05  # the threshold box's step; any value in [0, 1] is taken


def int_field(data: dict[str, Any], name: str, label: str, *, minimum: int = 0, blank_none: bool = False) -> int | None:
    raw = str(data.get(name, "")).strip().replace(",", "")
    if not raw:
        if blank_none:
            return None
        raise InvalidRequest(f"{label} is required", param=name)
    try:
        value = int(raw)
    except ValueError as exc:
        raise InvalidRequest(f"{label} must be a whole number", param=name) from exc
    if value < minimum:
        raise InvalidRequest(f"{label} must be at least {minimum}", param=name)
    return value


def dollars_to_micros(raw: str, label: str, param: str) -> int | None:
    raw = raw.strip().lstrip("$").replace(",", "")
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError as exc:
        raise InvalidRequest(f"{label} must be an amount like 12.50", param=param) from exc
    if value < 0 or value > 1e9:
        raise InvalidRequest(f"{label} must be between 0 and 1,000,000,000", param=param)
    return round(value * 1_000_000)


def batch_percent(raw: str, label: str, param: str) -> int | None:
    """A batch share typed as a whole percent ("50" or "50%"); None when left empty."""
    raw = raw.strip().rstrip("%").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 0 <= int(raw) <= 100:
        raise InvalidRequest(f"{label} must be a whole percent from 0 to 100", param=param)
    return int(raw)


def threshold_step(threshold: float) -> str:
    """The threshold box's step: 0.05, or "any" for a threshold set off that grid (through the API), which a
    browser would otherwise refuse to submit unchanged."""
    steps = threshold / THRESHOLD_STEP
    return f"{THRESHOLD_STEP:g}" if abs(steps - round(steps)) < 1e-6 else "any"


def quota_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The quota form, validated: blank budgets mean no budget. The guardrail fields are set only when the form
    carries them, so a post without them leaves the tenant's guardrail as it was."""
    return {
        "tokens_per_minute": int_field(data, "tokens_per_minute", "Tokens per minute"),
        "concurrent_requests": int_field(data, "concurrent_requests", "Concurrent requests", minimum=1),
        "monthly_token_budget": int_field(data, "monthly_token_budget", "Monthly token budget", blank_none=True),
        "monthly_cost_budget_micros": dollars_to_micros(
            str(data.get("monthly_cost_budget", "")), "Monthly spending budget", "monthly_cost_budget"
        ),
        **guardrail_fields(data),
        **storage_fields(data),
    }


def storage_fields(data: dict[str, Any]) -> dict[str, Any]:
    """Whether the tenant's responses are stored (on or off) and for how many days, as far as given."""
    fields: dict[str, Any] = {}
    if "store_responses" in data:
        choice = str(data["store_responses"]).strip()
        if choice not in ("on", "off"):
            raise InvalidRequest("Stored responses must be on or off", param="store_responses")
        fields["store_responses"] = choice == "on"
    if "response_retention_days" in data:
        days = int_field(data, "response_retention_days", "Days stored responses are kept", minimum=1)
        if days is not None and days > MAX_RETENTION_DAYS:
            raise InvalidRequest(
                f"Days stored responses are kept must be at most {MAX_RETENTION_DAYS:,}",
                param="response_retention_days",
            )
        fields["response_retention_days"] = days
    return fields


def guardrail_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The grounding guardrail's policy (off, score, flag or block), evidence (label_head, judge or both) and
    threshold (0 to 1), as far as given."""
    fields: dict[str, Any] = {}
    for name, label, choices in (
        ("grounding_policy", "Guardrail policy", GROUNDING_POLICIES),
        ("grounding_evidence", "Guardrail evidence", GROUNDING_EVIDENCE),
        ("routing_policy", "Routing policy", ROUTING_POLICIES),
    ):
        if name in data:
            value = str(data[name]).strip()
            if value not in choices:
                raise InvalidRequest(f"{label} must be one of {', '.join(choices)}", param=name)
            fields[name] = value
    if "grounding_threshold" in data:
        message = "Guardrail threshold must be a number from 0 to 1, such as 0.5"
        raw = str(data["grounding_threshold"]).strip()
        try:
            threshold = float(raw)
        except ValueError as exc:
            raise InvalidRequest(message, param="grounding_threshold") from exc
        if not math.isfinite(threshold) or not 0.0 <= threshold <= 1.0:
            raise InvalidRequest(message, param="grounding_threshold")
        fields["grounding_threshold"] = threshold
    return fields
