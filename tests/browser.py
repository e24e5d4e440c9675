"""A real browser for tests: Debian's chromium driven by Playwright (never a downloaded one).

Tests take the ``browser_page`` fixture (tests/conftest.py registers it once) and get a
fresh page of one chromium shared by the test module. Only one Playwright may run at a
time, and not for the whole session: its sync API keeps an event loop running while it is
open, and pytest-asyncio cannot run the async tests of later modules beside it. A missing
chromium or Playwright fails the test with what to install: ``scripts/setup`` installs both,
so on CI a missing browser is a broken setup, never a reason to skip.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.browser import CHROMIUM

SCREENSHOT_ENV = "MIQPS_SCREENSHOTS"
"""Set to a directory (``docs``) to have the browser tests save the screenshots the README
shows there."""

try:
    from playwright.sync_api import Browser, Page, sync_playwright

    PLAYWRIGHT_MISSING = ""
except ImportError as error:  # the fixture fails with this, instead of an import error
    PLAYWRIGHT_MISSING = str(error)


def chromium_path() -> str:
    """The chromium to drive, or a failed test that says how to install it."""
    found = CHROMIUM if Path(CHROMIUM).is_file() else shutil.which("chromium")
    if found is None:
        pytest.fail(
            f"no chromium at {CHROMIUM} nor on the PATH: the browser tests need "
            "Debian's 'chromium' package (scripts/setup installs it as root, or "
            "'apt-get install chromium'; set MIQPS_CHROMIUM to use another)",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if PLAYWRIGHT_MISSING:
        pytest.fail(
            f"Playwright for Python is missing ({PLAYWRIGHT_MISSING}): install the "
            "dev extra (scripts/setup); never 'playwright install', chromium comes "
            "from apt",
            pytrace=False,
        )
    executable = chromium_path()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def browser_page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"the page raised JavaScript errors: {errors}"


def screenshot_dir() -> Path | None:
    """Where to save screenshots for the docs, if asked to (:data:`SCREENSHOT_ENV`)."""
    wanted = os.environ.get(SCREENSHOT_ENV)
    return Path(wanted) if wanted else None
