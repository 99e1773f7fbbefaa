"""The browser tests' shared pieces: Debian's chromium driven by Playwright (no browser is
downloaded), screenshots under build/ui-screenshots/, the Airflow login and the trigger form."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.stack import ROOT, Stack

SHOTS = ROOT / "build" / "ui-screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: Chromium on a machine without a network or a screen (the flags the build machines need).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: The placement DAG's trigger form.
DAG = "celeritas_placement"


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless browser context on a fresh profile (Debian's chromium), closed after."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: run tests/integration/system_packages.sh")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile, sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1400, "height": 1100})
        try:
            yield context
        finally:
            context.close()


def shot(page: Any, name: str, *, full_page: bool = True) -> None:
    """A screenshot of ``page`` as build/ui-screenshots/NAME.png."""
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)


def log_in(page: Any, stack: Stack, screenshot: str | None = None) -> None:
    """Log in to Airflow as admin (a screenshot of the login page when ``screenshot`` names one)."""
    page.goto(f"{stack.airflow_url}/")
    page.locator("input[name=username]").fill("admin")
    page.locator("input[name=password]").fill(stack.password)
    if screenshot:
        shot(page, screenshot)
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: "/auth/login" not in url, timeout=30_000)


def open_trigger_form(page: Any, stack: Stack) -> Any:
    """Open the placement DAG's trigger form; its dialog."""
    page.goto(f"{stack.airflow_url}/dags/{DAG}")
    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="Model", exact=True).wait_for(timeout=60_000)
    return dialog
