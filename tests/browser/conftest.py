"""Browser fixtures: one headless Debian chromium for the browser tests, watched in every test for content
security policy violations, and a fresh tenant per test."""

from __future__ import annotations

import shutil
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.browser.pages import new_tenant


class WatchedBrowser:
    """The browser as a test uses it: every page and context it opens is listened to, and the console's pages
    must arrive with a content security policy and log no violation of it."""

    def __init__(self, browser: Any) -> None:
        self._browser = browser
        self.violations: list[str] = []
        self.unprotected: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._browser, name)

    def new_page(self, **options: Any) -> Any:
        return self._watch(self._browser.new_page(**options))

    def new_context(self, **options: Any) -> Any:
        return self._watch(self._browser.new_context(**options))

    def _watch(self, target: Any) -> Any:
        target.on("console", self._console)
        target.on("response", self._response)
        return target

    def _console(self, message: Any) -> None:
        if "Content Security Policy" in message.text:
            where = message.page.url if message.page is not None else "?"
            self.violations.append(f"{where}: {message.text}")

    def _response(self, response: Any) -> None:
        is_page = response.request.resource_type == "document"
        console_page = is_page and urlsplit(response.url).path.startswith("/console")
        if console_page and "content-security-policy" not in response.headers:
            self.unprotected.append(response.url)


@pytest.fixture(scope="package")
def chromium():
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    assert executable, "Debian's chromium is required: make setup installs it"
    with sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=executable,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                # A synthetic microphone, so the playground's recorder can be driven.
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
            ],
        )
        yield b
        b.close()


@pytest.fixture
def browser(chromium):
    watched = WatchedBrowser(chromium)
    yield watched
    assert watched.violations == [], "content security policy violations:\n" + "\n".join(watched.violations)
    assert watched.unprotected == [], "console pages without a content security policy: " + ", ".join(
        watched.unprotected
    )


@pytest.fixture
def tenant_key(server):
    return new_tenant(server)[1]
