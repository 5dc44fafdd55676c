"""Errors by audience: the API answers in OpenAI's JSON shape; console pages get an error page; HTMX requests
from the console get a toast swapped into the page they came from."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.enums import MediaType
from litestar.plugins.htmx import ClientRedirect, HTMXTemplate
from litestar.response import Redirect, Template

from api.errors import error_response, to_api_error
from console.auth import SignInRequired

logger = logging.getLogger(__name__)


def _is_htmx(request: Request[Any, Any, Any]) -> bool:
    return request.headers.get("hx-request") == "true"


def console_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    try:
        return _console_error(request, exc)
    except Exception:
        logger.exception("the console's error handler failed; answering plainly")
        return error_response(exc)


def _console_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if not request.url.path.startswith("/console"):
        return error_response(exc)
    if isinstance(exc, SignInRequired):
        if _is_htmx(request):
            return ClientRedirect(redirect_to=exc.signin)
        return Redirect(exc.signin, status_code=303)
    err = to_api_error(exc)
    if _is_htmx(request):
        # The page's htmx config swaps error responses too; these headers aim this one at the toast, whatever
        # target and selection the element that made the request asked for.
        return HTMXTemplate(
            template_name="console/_toast.html.jinja2",
            context={"message": err.message},
            status_code=err.status_code,
            media_type=MediaType.HTML,
            re_target="#toast",
            re_swap="innerHTML",
            trigger_event="tessera:error",
            params={"status": err.status_code},
            after="receive",
            headers={"HX-Reselect": ".toast-message"},
        )
    return Template(
        "console/error.html.jinja2",
        context={"status": err.status_code, "message": err.message},
        status_code=err.status_code,
        media_type=MediaType.HTML,
    )
