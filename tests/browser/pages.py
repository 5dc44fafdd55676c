"""What the browser tests share: tenants made through the admin API, signing in, and screenshots of every
page at desktop and mobile width, each checked for sideways scrolling and accessibility first."""

from __future__ import annotations

import time
import uuid

import httpx

from tests.conftest import ADMIN_KEY, REPO

ARTIFACTS = REPO / "artifacts" / "screenshots"
WIDTHS = {"desktop": 1280, "mobile": 390}


def wait_until(page, expression: str, timeout: float = 30_000) -> None:
    """Waits for a JavaScript expression to hold. Playwright's `wait_for_function` evaluates its expression with
    eval inside the page, which the console's content security policy refuses; `evaluate` is not subject to it."""
    from playwright.sync_api import Error

    deadline = time.monotonic() + timeout / 1000
    while True:
        try:
            if page.evaluate(expression):
                return
        except Error as exc:  # the page navigated while the expression ran: look again on the new one
            if "context was destroyed" not in str(exc):
                raise
        assert time.monotonic() < deadline, f"still false after {timeout / 1000:.0f} s: {expression}"
        time.sleep(0.1)


def new_tenant(server, prefix: str = "console") -> tuple[str, str]:
    """A fresh tenant through the admin API: (tenant id, API key)."""
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    tenant = httpx.post(
        server.base_url + "/admin/tenants", headers=admin, json={"name": f"{prefix}-{uuid.uuid4().hex[:6]}"}
    ).json()
    key = httpx.post(f"{server.base_url}/admin/tenants/{tenant['id']}/keys", headers=admin, json={}).json()["key"]
    return tenant["id"], key


def accessible(page, name: str) -> None:
    """axe-core's WCAG 2.1 A/AA rules on the page as it stands: no serious or critical violation."""
    from axe_playwright_python.sync_playwright import Axe

    options = {"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}}
    found = Axe().run(page, options=options).response["violations"]
    bad = [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in found
        if v["impact"] in ("serious", "critical")
    ]
    assert not bad, f"{name}: " + "; ".join(bad)


# The elements reaching past the viewport's right edge (outside scrolling boxes, or positioned, which a scrolling
# box does not hold unless it is positioned itself), to say what overflows.
OVERFLOWING = """(width) => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > width &&
    (getComputedStyle(e).position !== 'static' || !e.closest('.scroll')))
  .slice(0, 5).map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className + ' ' +
    Math.round(e.getBoundingClientRect().right))"""


def shoot(page, name: str) -> None:
    """Screenshots at both widths, after checking the page fits each width and passes the accessibility rules."""
    accessible(page, name)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for label, width in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": 900})
        # The layout fits the width: nothing makes the page scroll sideways.
        wide = page.evaluate(OVERFLOWING, width)
        assert page.evaluate("document.documentElement.scrollWidth") <= width, f"{name} overflows at {width}px: {wide}"
        page.screenshot(path=str(ARTIFACTS / f"{name}-{label}.png"), full_page=True)
    page.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})


def sign_in(page, server, key):
    page.goto(server.base_url + "/console/signin")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/playground")


def admin_sign_in(page, server):
    page.goto(server.base_url + "/console/admin/")
    page.wait_for_url("**/console/admin/signin")  # not signed in: sent to the admin sign-in
    page.get_by_label("Admin key").fill(ADMIN_KEY)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/admin/")


def cold_playground(browser, server, tenant_key) -> dict:
    """Load the playground in a fresh context, signed in without rendering a page so the cache is cold."""
    context = browser.new_context()
    context.request.get(server.base_url + "/console/signin")
    token = next(c["value"] for c in context.cookies() if c["name"] == "csrftoken")
    signed = context.request.post(
        server.base_url + "/console/signin", form={"api_key": tenant_key, "_csrf_token": token}, max_redirects=0
    )
    assert signed.status == 303
    page = context.new_page()
    page.goto(server.base_url + "/console/playground", wait_until="load")
    wait_until(page, "performance.getEntriesByName('tessera:interactive').length > 0")
    figures = page.evaluate(
        """() => {
        const nav = performance.getEntriesByType('navigation')[0];
        const res = performance.getEntriesByType('resource');
        return {
          html_bytes: nav.transferSize, html_decoded: nav.decodedBodySize,
          resources: res.map(r => ({
            name: new URL(r.name).pathname, transfer: r.transferSize, decoded: r.decodedBodySize,
          })),
          dom_interactive_ms: nav.domInteractive, dom_content_loaded_ms: nav.domContentLoadedEventEnd,
          load_ms: nav.loadEventEnd,
          interactive_ms: performance.getEntriesByName('tessera:interactive')[0].startTime,
          htmx_ready: !!window.htmx,
        };
    }"""
    )
    context.close()
    return figures
