"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) on `ustun serve`.

Set `USTUN_UPDATE_SCREENSHOTS=1` to refresh the screenshots under `docs/screenshots/`:
`USTUN_UPDATE_SCREENSHOTS=1 pytest tests/e2e/test_dashboard_browser.py -k "fits and sqlite"`.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from PIL import Image
from playwright.sync_api import Browser, Page, expect

from browser_support import (
    DESKTOP,
    PHONE,
    RETRY_BY_HAND,
    SCREENSHOTS,
    Receiver,
    csp_violations,
    new_key,
    off_loop,
    receiving,
    served,
)
from support import (
    BACKENDS,
    Server,
    UstunProcess,
    wait_for,
)
from ustun.service.plumbing.accounts import account_for_key
from ustun.store import Database
from ustun.webhooks.sending import outbox

pytestmark = pytest.mark.e2e

# Event types a library user may emit: longer than any of the catalogue's.
LONG_TYPES = [
    "customer.subscription.payment_method.automatically_updated",
    "invoice.payment_action_required.reminder_sent",
    "warehouse.shipment.partially_delivered",
]
LONG_PATH = "/a-rather-long-path/for-the-orders-service/incoming?tenant=acme-international"


@dataclass
class Service:
    """A running `ustun serve` and the first account's API key."""

    server: Server
    key: str
    database_url: str

    def new_key(self, account: str) -> str:
        """A key of another account, made with `ustun keys create`."""
        return new_key(self.database_url, "--account", account)


@pytest.fixture(scope="module", params=BACKENDS)
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("dashboard")
    with served(request.param, tmp, **RETRY_BY_HAND) as (server, url, key):
        yield Service(server, key, url)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as running:
        yield running


# `browser`, Debian's Chromium driven by Playwright, is shared with other modules: conftest.py.


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
    """Take a screenshot (the whole page on a wide screen, the first screenful on a phone) in
    256 colours, so the PNG stays small; keep it under docs/ when asked to refresh them."""
    target = SCREENSHOTS if os.environ.get("USTUN_UPDATE_SCREENSHOTS") else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    width = page.viewport_size["width"] if page.viewport_size else DESKTOP["width"]
    taken = Image.open(io.BytesIO(page.screenshot(full_page=width >= DESKTOP["width"])))
    taken.convert("RGB").quantize(256).save(target / f"{name}.png", optimize=True)


def test_log_in_see_the_overview_and_log_out(page: Page, service: Service) -> None:
    log_in(page, service)
    expect(page.locator("header .who")).to_have_text("default")
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
        page.get_by_role("link", name="Deliveries").click()
        # Measure the new page, not the one the click is leaving.
        expect(page).to_have_url(re.compile(r"/dashboard/deliveries$"))
        page.wait_for_load_state()
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0
    finally:
        context.close()


def test_create_endpoint_see_failed_attempt_retry_and_succeed(
    page: Page, service: Service, receiver: Receiver
) -> None:
    log_in(page, service)
    page.get_by_role("link", name="Endpoints").click()
    page.get_by_label("URL", exact=True).fill(receiver.url)
    page.get_by_label("Events").fill("ping")
    page.get_by_role("button", name="Create endpoint").click()
    secret = page.locator("[data-secret]")
    expect(secret).to_contain_text("whsec_")

    page.locator("[data-created] a").click()
    page.get_by_role("button", name="Send test event").click()
    expect(page.get_by_text("Test event sent.")).to_be_visible()
    page.locator("table a[href^='/dashboard/deliveries/dlv_']").first.click()

    # The receiver answers 500: the attempts timeline shows it, and the page keeps polling.
    expect(page.locator("[data-attempt]").first).to_contain_text("500", timeout=20_000)
    expect(page.locator("[data-status]")).to_have_attribute("data-status", "failed")

    receiver.accepting = True
    page.get_by_role("button", name="Retry").click()
    expect(page.locator("[data-status]")).to_have_attribute(
        "data-status", "succeeded", timeout=20_000
    )
    expect(page.locator("[data-attempt]")).to_have_count(2)
    expect(page.locator("[data-attempt]").last).to_contain_text("204")

    page.get_by_role("link", name="Events").click()
    page.get_by_label("Type").select_option("ping")
    page.locator("table a[href^='/dashboard/events/evt_']").first.click()
    expect(page.locator("[data-payload]")).to_contain_text('"type": "ping"')
    page.get_by_role("link", name="Overview").click()

    # The dispatcher reported both attempts through the instrumentation hooks.
    scraped = httpx.get(f"{service.server.base_url}/metrics").text
    assert re.search(r'ustun_webhook_delivery_attempts_total\{outcome="failed"\} [1-9]', scraped)
    assert re.search(r'ustun_webhook_delivery_attempts_total\{outcome="succeeded"\} [1-9]', scraped)


def test_create_a_broker_endpoint_from_the_form(page: Page, service: Service) -> None:
    # An account of its own: no event of the other tests goes to this unreachable broker.
    log_in(page, service, service.new_key("broker-owner"))
    page.get_by_role("link", name="Endpoints").click()
    page.get_by_label("Kind").select_option("nats")
    page.get_by_label("URL", exact=True).fill("nats://dash-user:Pw-3e5d1@broker.example.com:4222")
    page.get_by_label("Exchange or subject").fill("ustun.events")
    page.get_by_label("Signature").select_option("ed25519")
    page.get_by_role("button", name="Create endpoint").click()
    expect(page.locator("[data-secret]")).to_contain_text("whpk_")
    public_key = page.locator("[data-secret]").inner_text().strip()

    page.locator("[data-created] a").click()
    details = page.locator(".details")
    expect(details).to_contain_text("nats")
    expect(details).to_contain_text("ustun.events")
    expect(details).to_contain_text("nats://broker.example.com:4222")
    expect(details).to_contain_text(public_key)
    assert "Pw-3e5d1" not in page.content()
    assert "dash-user" not in page.content()


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
    backend = "sqlite" if service.database_url.startswith("sqlite") else "postgresql"
    with served(backend, tmp_path, "--no-worker") as (quiet, url, key):
        worker = UstunProcess(["worker"], {"USTUN_DATABASE_URL": url}, tmp_path / "worker.log")
        try:
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
        finally:
            if worker.alive():
                worker.stop()


@dataclass
class Seeded:
    """What `seeded` put into the first account: enough rows to push any table wide."""

    endpoint_id: str
    delivery_id: str
    event_id: str
    job_id: str


async def emit_long_types(database_url: str, key: str) -> None:
    """Emit events of long, non-catalogue types, as a library user's own code would."""
    db = Database(database_url)
    try:
        account = await account_for_key(db, key)
        assert account is not None
        for event_type in LONG_TYPES:
            async with db.unit_of_work() as uow:
                await outbox.emit(uow, account.id, event_type, {"note": "x" * 40})
    finally:
        await db.dispose()


@pytest.fixture(scope="module")
def seeded(service: Service) -> Iterator[Seeded]:
    """Endpoints with long URLs, payments, events of long types, failed deliveries and jobs."""
    receiver = Receiver()
    base = service.server.base_url
    auth = {"authorization": f"Bearer {service.key}"}
    try:
        made = [
            httpx.post(
                f"{base}/v1/webhook-endpoints",
                json={"url": receiver.url + suffix, "events": ["*"], "description": "seeded"},
                headers=auth,
            )
            for suffix in (LONG_PATH, "")
        ]
        assert all(answer.status_code == 201 for answer in made), made[0].text
        for n in range(4):
            paid = httpx.post(
                f"{base}/v1/payments",
                json={"amount": 1250 + n, "currency": "EUR"},
                headers={**auth, "idempotency-key": f"seed-{n}-{service.database_url}"},
            )
            assert paid.status_code == 201, paid.text
        reports = [
            httpx.post(f"{base}/v1/reports", json={"period": "2026", "format": "csv"}, headers=auth)
            for _ in range(2)
        ]
        assert all(report.status_code == 202 for report in reports), reports[0].text
        off_loop(lambda: asyncio.run(emit_long_types(service.database_url, service.key)))

        def listed() -> list[dict[str, str]] | None:
            data = httpx.get(
                f"{base}/v1/deliveries", params={"status": "failed", "limit": 100}, headers=auth
            ).json()["data"]
            # Each endpoint's: 4 payments, 3 long types, and the 2 reports' job.completed (the
            # reports render in the worker's own process, so they come last).
            each = Counter(delivery["endpoint_id"] for delivery in data)
            enough = all(
                each[endpoint.json()["id"]] >= 4 + len(LONG_TYPES) + 2 for endpoint in made
            )
            return data if enough else None

        failed = wait_for(listed, timeout=60, what="the seeded deliveries to fail once")
        yield Seeded(
            made[0].json()["id"], failed[0]["id"], failed[0]["event_id"], reports[0].json()["id"]
        )
    finally:
        receiver.http.shutdown()
        receiver.http.server_close()


def overflows(page: Page) -> list[str]:
    """What sticks out sideways: the page past the viewport, a table past its container."""
    found: list[str] = page.evaluate(
        """() => {
            const found = [];
            const root = document.documentElement;
            if (root.scrollWidth > window.innerWidth) {
                found.push(`page ${root.scrollWidth} > ${window.innerWidth}`);
            }
            document.querySelectorAll("main table").forEach((table, i) => {
                const box = table.parentElement;
                if (table.scrollWidth > box.clientWidth || box.scrollWidth > box.clientWidth) {
                    found.push(`table ${i} ${table.scrollWidth} > ${box.clientWidth}`);
                }
            });
            return found;
        }"""
    )
    return found


# Pages whose tables are checked, and the minimum number of rows each must show.
PAGES = {
    "overview": ("/dashboard", 1),
    "endpoints": ("/dashboard/endpoints", 2),
    "endpoint": ("/dashboard/endpoints/{endpoint_id}", 8),
    "deliveries": ("/dashboard/deliveries", 16),
    "delivery": ("/dashboard/deliveries/{delivery_id}", 0),
    "events": ("/dashboard/events", 8),
    "event": ("/dashboard/events/{event_id}", 2),
    "jobs": ("/dashboard/jobs", 2),
    "job": ("/dashboard/jobs/{job_id}", 0),
}
SCREENSHOT_PAGES = ("overview", "endpoint", "deliveries", "delivery")


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280", "390"])
def test_every_page_fits_the_screen(
    browser: Browser, service: Service, seeded: Seeded, viewport: dict[str, int], tmp_path: Path
) -> None:
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    refused = csp_violations(page)
    try:
        log_in(page, service)
        for name, (path, rows) in PAGES.items():
            url = service.server.base_url + path.format(**vars(seeded))
            answer = page.goto(url)
            assert answer is not None, url
            assert answer.status == 200, url
            assert page.locator("main table tbody tr").count() >= rows, name
            if name in SCREENSHOT_PAGES:
                screenshot(page, f"{name}-{viewport['width']}", tmp_path)
            assert overflows(page) == [], f"{name} at {viewport['width']} px"
            if name == "overview":  # event types as they are, not uppercased
                expect(page.locator("[data-figure=events]")).to_contain_text(
                    LONG_TYPES[0], use_inner_text=True
                )
    finally:
        context.close()
    assert refused == []


def test_the_copy_button_copies_a_new_secret(
    browser: Browser, service: Service, seeded: Seeded
) -> None:
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    refused = csp_violations(page)
    try:
        log_in(page, service)
        page.goto(f"{service.server.base_url}/dashboard/endpoints/{seeded.endpoint_id}")
        page.get_by_role("button", name="Rotate secret").click()
        secret = page.locator("[data-secret]").inner_text().strip()
        assert secret.startswith("whsec_")
        page.get_by_role("button", name="Copy").click()
        expect(page.get_by_role("button", name="Copied")).to_be_visible()
        assert page.evaluate("navigator.clipboard.readText()") == secret
    finally:
        context.close()
    assert refused == []


def test_the_favicon_loads(page: Page, service: Service) -> None:
    # Headless Chromium fetches no tab icon of its own: open the one the pages link to.
    log_in(page, service)
    href = page.locator("link[rel=icon]").get_attribute("href")
    assert href == "/favicon.ico"
    icon = page.goto(service.server.base_url + href)
    assert icon is not None
    assert icon.status == 200
    assert icon.header_value("content-type") == "image/x-icon"
