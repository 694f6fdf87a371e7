"""Fixtures for the dashboard's browser tests: one headless Chromium, a page per test.

Debian's `chromium` (`make sysdeps` installs it) driven by Playwright: no browser
download, no network. The tests skip only where it is missing and cannot be installed
(not root); as root a missing browser is a failure that names the fix.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, async_playwright, expect

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # without these Chromium reaches for the network
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

# A page's assertions retry up to this long (Playwright's default is 5 s): room for a
# loaded two-core machine, never a wait when the page is already right.
expect.set_options(timeout=15_000)


def _need_chromium() -> None:
    if CHROMIUM.exists():
        return
    if os.geteuid() != 0:
        pytest.skip(f"{CHROMIUM} is missing and only root can install it (make sysdeps)")
    pytest.fail(f"{CHROMIUM} is missing: `make sysdeps` installs Debian's chromium")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Browser]:
    """Headless Chromium for the whole session."""
    _need_chromium()
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest_asyncio.fixture(loop_scope="session")
async def page(browser: Browser, request: pytest.FixtureRequest) -> AsyncIterator[Page]:
    """A page in a fresh context; a screenshot named after the test is saved at the end.

    Any uncaught script error on the page fails the test.
    """
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    tab = await context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield tab
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        await tab.screenshot(path=ARTIFACTS / f"{request.node.name}.png")
        await context.close()
    assert not errors, errors
