"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) on `ustun serve`.

Set `USTUN_UPDATE_SCREENSHOTS=1` to refresh the screenshots under `docs/screenshots/`.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from support import (
    BACKENDS,
    USTUN,
    Server,
    UstunProcess,
    drop_pg_database,
    make_pg_database,
    wait_for,
)

pytestmark = pytest.mark.e2e
T = TypeVar("T")

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
    # One retry, far away: only the dashboard's Retry button sends a failed delivery again.
    server = Server(
        url,
        tmp / "serve.log",
        USTUN_WEBHOOK_ALLOW_PRIVATE="1",
        USTUN_WEBHOOK_RETRY_SCHEDULE="3600",
        USTUN_WEBHOOK_TIMEOUT="5",
    ).start()
    try:
        key = wait_for(lambda: KEY.search(server.output()), what="the first API key").group()
        yield Service(server, key, url)
    finally:
        server.stop()
        if name is not None:
            off_loop(lambda: drop_pg_database(name))


class Receiver:
    """A local webhook receiver that answers 500 until told to accept."""

    def __init__(self) -> None:
        self.accepting = False
        self.received: list[bytes] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver.received.append(self.rfile.read(int(self.headers["content-length"])))
                status = 204 if receiver.accepting else 500
                self.send_response(status)
                self.send_header("content-length", "0" if status == 204 else "12")
                self.end_headers()
                if status != 204:
                    self.wfile.write(b"not yet, sorry"[:12])

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/hook"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.http.shutdown()
    running.http.server_close()


# `browser`, Debian's Chromium driven by Playwright, is shared with other modules: conftest.py.


def csp_violations(page: Page) -> list[str]:
    """Collect what the page's Content-Security-Policy refuses (Chromium logs each refusal)."""
    refused: list[str] = []
    page.on(
        "console",
        lambda message: (
            refused.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    return refused


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser page; the test fails if the dashboard's CSP refused anything on it."""
    context = browser.new_context()
    opened = context.new_page()
    refused = csp_violations(opened)
    yield opened
    context.close()
    assert refused == [], "the Content-Security-Policy refused something the dashboard needs"


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


def test_the_csp_refuses_inline_code_and_framing(browser: Browser, service: Service) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        log_in(page, service)
        with page.expect_console_message(lambda m: "Content Security Policy" in m.text):
            page.evaluate(
                """() => {
                    const script = document.createElement("script");
                    script.textContent = "document.body.dataset.injected = 'yes'";
                    document.body.append(script);
                }"""
            )
        expect(page.locator("body")).not_to_have_attribute("data-injected", "yes")

        framing = context.new_page()
        with framing.expect_console_message(lambda m: "frame-ancestors" in m.text):
            framing.set_content(
                f'<iframe src="{service.server.base_url}/dashboard/login"></iframe>'
            )
    finally:
        context.close()


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


def test_usable_at_phone_width(browser: Browser, service: Service, tmp_path: Path) -> None:
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    try:
        log_in(page, service)
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0
        expect(page.get_by_role("button", name="Log out")).to_be_visible()
        page.get_by_role("link", name="Deliveries").click()
        # Measure the new page, not the one the click is leaving.
        expect(page).to_have_url(re.compile(r"/dashboard/deliveries$"))
        page.wait_for_load_state()
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0
        screenshot(page, "phone-deliveries", tmp_path)
    finally:
        context.close()


def test_create_endpoint_see_failed_attempt_retry_and_succeed(
    page: Page, service: Service, receiver: Receiver, tmp_path: Path
) -> None:
    log_in(page, service)
    page.get_by_role("link", name="Endpoints").click()
    page.get_by_label("URL", exact=True).fill(receiver.url)
    page.get_by_label("Events").fill("ping")
    page.get_by_role("button", name="Create endpoint").click()
    secret = page.locator("[data-secret]")
    expect(secret).to_contain_text("whsec_")
    screenshot(page, "endpoints", tmp_path)

    page.locator("[data-created] a").click()
    page.get_by_role("button", name="Send test event").click()
    expect(page.get_by_text("Test event sent.")).to_be_visible()
    page.locator("table a[href^='/dashboard/deliveries/dlv_']").first.click()

    # The receiver answers 500: the attempts timeline shows it, and the page keeps polling.
    expect(page.locator("[data-attempt]").first).to_contain_text("500", timeout=20_000)
    expect(page.locator("[data-status]")).to_have_attribute("data-status", "failed")
    screenshot(page, "delivery-failed", tmp_path)

    receiver.accepting = True
    page.get_by_role("button", name="Retry").click()
    expect(page.locator("[data-status]")).to_have_attribute(
        "data-status", "succeeded", timeout=20_000
    )
    expect(page.locator("[data-attempt]")).to_have_count(2)
    expect(page.locator("[data-attempt]").last).to_contain_text("204")
    screenshot(page, "delivery", tmp_path)

    page.get_by_role("link", name="Events").click()
    page.get_by_label("Type").select_option("ping")
    page.locator("table a[href^='/dashboard/events/evt_']").first.click()
    expect(page.locator("[data-payload]")).to_contain_text('"type": "ping"')
    screenshot(page, "event", tmp_path)
    page.get_by_role("link", name="Overview").click()
    screenshot(page, "overview", tmp_path)

    # The dispatcher reported both attempts through the instrumentation hooks.
    scraped = httpx.get(f"{service.server.base_url}/metrics").text
    assert re.search(r'ustun_webhook_delivery_attempts_total\{outcome="failed"\} [1-9]', scraped)
    assert re.search(r'ustun_webhook_delivery_attempts_total\{outcome="succeeded"\} [1-9]', scraped)


def test_a_second_account_sees_nothing_of_the_first(
    browser: Browser, service: Service, receiver: Receiver
) -> None:
    first = browser.new_context()
    second = browser.new_context()
    try:
        mine = first.new_page()
        log_in(mine, service)
        mine.goto(f"{service.server.base_url}/dashboard/endpoints")
        mine.get_by_label("URL", exact=True).fill(receiver.url + "/private")
        mine.get_by_role("button", name="Create endpoint").click()
        endpoint_id = mine.locator("[data-created]").get_attribute("data-created")
        assert endpoint_id

        theirs = second.new_page()
        log_in(theirs, service, service.new_key("someone-else"))
        expect(theirs.locator("header .who")).to_have_text("someone-else")
        for path in ("endpoints", "events", "deliveries"):
            theirs.goto(f"{service.server.base_url}/dashboard/{path}")
            assert endpoint_id not in theirs.content()
            assert receiver.url not in theirs.content()
        answer = theirs.goto(f"{service.server.base_url}/dashboard/endpoints/{endpoint_id}")
        assert answer is not None
        assert answer.status == 404
    finally:
        first.close()
        second.close()


def test_a_job_page_follows_progress_live_until_done(
    page: Page, service: Service, tmp_path: Path
) -> None:
    # A database of its own and a server without a worker: the job waits, page already open,
    # until a separate `ustun worker` process starts and runs it.
    if service.database_url.startswith("sqlite"):
        name, url = None, f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        name, url = off_loop(make_pg_database)
    quiet = Server(url, tmp_path / "quiet.log", "--no-worker").start()
    worker = UstunProcess(["worker"], {"USTUN_DATABASE_URL": url}, tmp_path / "worker.log")
    try:
        key = wait_for(lambda: KEY.search(quiet.output()), what="the first API key").group()
        auth = {"authorization": f"Bearer {key}"}
        accepted = httpx.post(
            f"{quiet.base_url}/v1/reports",
            json={"period": "2026", "format": "csv"},
            headers=auth,
        )
        assert accepted.status_code == 202, accepted.text
        job_id = accepted.json()["id"]

        page.goto(f"{quiet.base_url}/dashboard")
        page.get_by_label("API key").fill(key)
        page.get_by_role("button", name="Log in").click()
        page.get_by_role("link", name="Jobs").click()
        page.get_by_role("link", name=job_id).click()
        expect(page.locator("[data-field=status]")).to_have_text("pending")
        expect(page.locator("[data-job-stream]")).to_have_count(1)

        worker.start()
        expect(page.locator("[data-field=status]")).to_have_text("done", timeout=30_000)
        expect(page.locator("[data-result]")).to_be_visible()
        expect(page.locator("progress")).to_have_attribute("value", "100")
        screenshot(page, "job", tmp_path)
    finally:
        if worker.alive():
            worker.stop()
        quiet.stop()
        if name is not None:
            off_loop(lambda: drop_pg_database(name))
