"""Browser fixtures: one headless Debian chromium for the browser tests, and a fresh tenant per test."""

from __future__ import annotations

import shutil

import pytest

from tests.browser.pages import new_tenant


@pytest.fixture(scope="package")
def browser():
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
def tenant_key(server):
    return new_tenant(server)[1]
