"""Real-process tests: each gets an empty database of its own on both backends; browser tests
share one headless Chromium per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from support import (
    BACKENDS,
    FIRST_KEY,
    Served,
    Server,
    drop_pg_database,
    make_pg_database,
    wait_for,
)


@pytest.fixture(params=BACKENDS)
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database nobody has migrated yet."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ustun.db'}"
        return
    name, url = make_pg_database()
    yield url
    drop_pg_database(name)


CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps dialling Google on a closed network.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless, driven by Playwright."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: apt-get install chromium (.ci/run does)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module", params=BACKENDS)
def module_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """An empty database of each backend, shared by the servers of one test module."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('module-sqlite') / 'ustun.db'}"
        return
    name, url = make_pg_database()
    yield url
    drop_pg_database(name)


@pytest.fixture(scope="module")
def served(module_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One `ustun serve` per module and backend, on a fresh database, webhooks to anywhere."""
    tmp = tmp_path_factory.mktemp("served")
    # Schemathesis sends bad keys on purpose; at the default limit of failed bearer checks
    # per address the rest of its run would be 429s.
    server = Server(
        module_database,
        tmp / "serve.log",
        USTUN_WEBHOOK_ALLOW_PRIVATE="1",
        USTUN_AUTH_FAILURE_LIMIT="1000000",
        USTUN_RATE_LIMIT="0",  # and it sends far more than an account's request rate
    ).start()
    try:
        key = wait_for(lambda: FIRST_KEY.search(server.output()), what="the first API key")
        yield Served(server.base_url, key.group())
    finally:
        server.stop()
