"""How console handlers render: one helper, so every page gets its area, active tab and status the same way."""

from __future__ import annotations

from typing import Any

from litestar.enums import MediaType
from litestar.plugins.htmx import HTMXTemplate
from litestar.response import Template

TOAST_EVENT = "tessera:toast"  # console.js shows the message of this HX-Trigger event in the page's toast


def page(template: str, *, area: str, active: str = "", status_code: int = 200, **context: Any) -> Template:
    return Template(
        template,
        context={"area": area, "active": active, **context},
        media_type=MediaType.HTML,
        status_code=status_code,
        # Console pages hold a tenant's data and, once, a new key: never cached, nor restored from history.
        headers={"cache-control": "no-store"},
    )


def toasted(template: str, *, message: str, area: str, **context: Any) -> HTMXTemplate:
    """The partial an HTMX write action answers with, and an `HX-Trigger` asking the page to toast `message`."""
    return HTMXTemplate(
        template_name=template,
        context={"area": area, "active": "", **context},
        media_type=MediaType.HTML,
        trigger_event=TOAST_EVENT,
        params={"message": message},
        after="receive",
        headers={"cache-control": "no-store"},
    )


def money(micros: int | None, places: int = 6) -> str:
    """Millionths of the billing currency, as the console shows them: to six places by default, because a
    single request often costs a fraction of a cent."""
    return f"${(micros or 0) / 1_000_000:,.{places}f}"
