"""Console error responses by audience, on a real Litestar app with the console's templates."""

from datetime import date
from pathlib import Path

from litestar import get
from litestar.plugins.htmx import HTMXPlugin
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from litestar.template.config import TemplateConfig
from litestar.testing import create_test_client

from console.errors import console_error
from console.usage import csv_response
from serving.errors import InvalidRequest

TEMPLATES = Path(__file__).resolve().parents[3] / "templates"


@get("/console/boom")
async def console_boom() -> None:
    raise InvalidRequest("東京 already exists", param="name")


@get("/v1/boom")
async def api_boom() -> None:
    raise InvalidRequest("東京 already exists", param="name")


def _client():
    return create_test_client(
        route_handlers=[console_boom, api_boom],
        template_config=TemplateConfig(directory=TEMPLATES, engine=JinjaTemplateEngine),
        plugins=[HTMXPlugin()],
        exception_handlers={Exception: console_error, HTTP_500_INTERNAL_SERVER_ERROR: console_error},
    )


def test_htmx_requests_get_a_toast_even_for_text_headers_cannot_carry():
    with _client() as client:
        resp = client.get("/console/boom", headers={"hx-request": "true"})
    assert resp.status_code == 400
    assert resp.headers["hx-retarget"] == "#toast"
    assert resp.headers["hx-reselect"] == ".toast-message"
    assert "東京 already exists" in resp.text
    assert "東京" not in resp.headers.get("hx-trigger", "")


def test_pages_get_an_error_page_and_the_api_json():
    with _client() as client:
        page = client.get("/console/boom")
        api = client.get("/v1/boom")
    assert page.status_code == 400
    assert "Something went wrong (400)" in page.text
    assert api.status_code == 400
    assert api.json()["error"] == {
        "message": "東京 already exists",
        "type": "invalid_request_error",
        "param": "name",
        "code": "invalid_request",
    }


def test_csv_filenames_survive_any_tenant_name():
    resp = csv_response("day\n", 'Café "東京"\r\nx', date(2026, 1, 1), date(2026, 1, 2))
    disposition = resp.headers["content-disposition"]
    disposition.encode("latin-1")  # a header must be Latin-1
    assert "\r" not in disposition
    assert "\n" not in disposition
    assert 'filename="tessera-usage-Caf-x-2026-01-01-2026-01-02.csv"' in disposition
    assert "filename*=UTF-8''tessera-usage-Caf%C3%A9%20%22%E6%9D%B1%E4%BA%AC%22%0D%0Ax-2026-01-01" in disposition
