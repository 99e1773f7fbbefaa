"""The integration tests' deployment (tests/integration/stack.py), started once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.stack import ROOT, Stack, in_sessions, leftovers, missing_system_packages, start_stack
from tests.integration.ui import chromium


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """PostgreSQL, Redis, MLflow and Airflow with two Celery workers; every process stopped after."""
    missing = missing_system_packages()
    if missing:
        pytest.fail(f"missing Debian packages {', '.join(missing)}: run tests/integration/system_packages.sh")
    running = start_stack(ROOT / "build" / "integration")
    try:
        yield running
    finally:
        running.stop()
    left = sorted({*leftovers(running.marker), *in_sessions(running.sessions)})
    assert left == [], f"processes left running after the stack stopped: {left}"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Debian's chromium through Playwright, one fresh profile per test module."""
    with chromium() as context:
        yield context
