"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) on `ustun serve`.

Set `USTUN_UPDATE_SCREENSHOTS=1` to refresh the screenshots under `docs/screenshots/`.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from support import BACKENDS, USTUN, Server, drop_pg_database, make_pg_database, wait_for

pytestmark = pytest.mark.e2e
T = TypeVar("T")

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
KEY = re.compile(r"ustun_sk_[A-Za-z0-9_-]{43}")
SCREENSHOTS = Path(__file__).parents[2] / "docs" / "screenshots"
PHONE = {"width": 390, "height": 844}


@dataclass
class Service:
    """A running `ustun serve` and the first account's API key."""

    server: Server
    key: str
    database_url: str

    def new_key(self, account: str) -> str:
        """A key of another account, made with `ustun keys create`."""
        done = subprocess.run(
            [USTUN, "keys", "create", "--account", account],
            env={**os.environ, "USTUN_DATABASE_URL": self.database_url},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout.strip()


def off_loop(work: Callable[[], T]) -> T:
    """Run `work` (which runs its own asyncio loop) outside Playwright's running loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(work).result()


@pytest.fixture(scope="module", params=BACKENDS)
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("dashboard")
    if request.param == "sqlite":
        name, url = None, f"sqlite:///{tmp / 'ustun.db'}"
    else:
        name, url = off_loop(make_pg_database)
    server = Server(url, tmp / "serve.log", USTUN_WEBHOOK_ALLOW_PRIVATE="1").start()
    try:
        key = wait_for(lambda: KEY.search(server.output()), what="the first API key").group()
        yield Service(server, key, url)
    finally:
        server.stop()
        if name is not None:
            off_loop(lambda: drop_pg_database(name))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: apt-get install chromium (.ci/run does)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    yield context.new_page()
    context.close()


def log_in(page: Page, service: Service, key: str | None = None) -> None:
    page.goto(f"{service.server.base_url}/dashboard")
    expect(page).to_have_url(re.compile(r"/dashboard/login$"))
    page.get_by_label("API key").fill(key or service.key)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


def screenshot(page: Page, name: str, tmp_path: Path) -> None:
    """Take a full-page screenshot; keep it under docs/ when asked to refresh them."""
    target = SCREENSHOTS if os.environ.get("USTUN_UPDATE_SCREENSHOTS") else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target / f"{name}.png"), full_page=True)


def test_log_in_see_the_overview_and_log_out(page: Page, service: Service, tmp_path: Path) -> None:
    log_in(page, service)
    expect(page.locator("header .who")).to_have_text("default")
    screenshot(page, "overview", tmp_path)
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/dashboard/login$"))
    page.goto(f"{service.server.base_url}/dashboard")
    expect(page).to_have_url(re.compile(r"/dashboard/login$"))


def test_a_wrong_key_shows_an_error(page: Page, service: Service) -> None:
    page.goto(f"{service.server.base_url}/dashboard/login")
    page.get_by_label("API key").fill("ustun_sk_wrong")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_contain_text("not valid")


def test_a_form_posted_without_its_csrf_token_is_refused(page: Page, service: Service) -> None:
    log_in(page, service)
    page.evaluate("document.querySelector('form.logout input[name=csrf_token]').remove()")
    with page.expect_response(re.compile(r"/dashboard/logout$")) as answer:
        page.get_by_role("button", name="Log out").click()
    assert answer.value.status == 403
    assert "csrf-failed" in page.content()
    page.goto(f"{service.server.base_url}/dashboard")
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


def test_usable_at_phone_width(browser: Browser, service: Service) -> None:
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    try:
        log_in(page, service)
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0
        expect(page.get_by_role("button", name="Log out")).to_be_visible()
    finally:
        context.close()
