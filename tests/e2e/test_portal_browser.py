"""The consumer portal in a real headless Chromium (Debian's, driven by Playwright) on
`ustun serve`: a portal link for one account, its endpoints, deliveries and catalogue.

Set `USTUN_UPDATE_SCREENSHOTS=1` to refresh `docs/screenshots/portal-390.png` and
`portal-1280.png`: `USTUN_UPDATE_SCREENSHOTS=1 pytest tests/e2e/test_portal_browser.py -k
"fits and sqlite"`.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import update

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
    wait_for,
)
from ustun.store import Database
from ustun.store.tables import portal_sessions

pytestmark = pytest.mark.e2e


@dataclass
class Portal:
    """A running `ustun serve`, an operator key, and two accounts' keys."""

    server: Server
    database_url: str
    operator: str
    acme: str
    globex: str

    def http(self, key: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.server.base_url,
            headers={"authorization": f"Bearer {key}"},
            timeout=10,
        )

    def link(self, account: str = "acme", **body: Any) -> dict[str, Any]:
        """A new portal session of `account`, as an operator opens it."""
        with self.http(self.operator) as http:
            made = http.post("/v1/portal-sessions", json={"account": account, **body})
        assert made.status_code == 201, made.text
        found: dict[str, Any] = made.json()
        return found


@pytest.fixture(scope="module", params=BACKENDS)
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Portal]:
    tmp = tmp_path_factory.mktemp("portal")
    with served(request.param, tmp, **RETRY_BY_HAND) as (server, url, _):
        yield Portal(
            server,
            url,
            operator=new_key(url, "--account", "ops", "--operator"),
            acme=new_key(url, "--account", "acme"),
            globex=new_key(url, "--account", "globex"),
        )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as running:
        yield running


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page; the test fails if the portal's Content-Security-Policy refused anything."""
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    opened = context.new_page()
    refused = csp_violations(opened)
    yield opened
    context.close()
    assert refused == [], refused


def _refused(page: Page, says: str) -> None:
    expect(page.get_by_role("heading", name="This link cannot be used")).to_be_visible()
    expect(page.locator("#refused-detail")).to_contain_text(says)
    expect(page.locator("#view-endpoints")).to_be_hidden()


def test_a_portal_link_manages_one_accounts_endpoint_and_retries_its_delivery(
    page: Page, service: Portal, receiver: Receiver
) -> None:
    with service.http(service.globex) as globex:
        theirs = globex.post(
            "/v1/webhook-endpoints",
            json={"url": "https://globex.example/hook", "description": "GLOBEX ONLY"},
        ).json()["id"]
    session = service.link("acme")
    assert session["url"] == f"{service.server.base_url}/portal/#token={session['token']}"

    page.goto(session["url"])
    expect(page.get_by_role("heading", name="Endpoints")).to_be_visible()
    assert "ptl_" not in page.url  # out of the address bar (and history) at once
    expect(page.get_by_text("globex.example")).to_have_count(0)

    page.get_by_role("button", name="Add endpoint").click()
    page.get_by_label("URL").fill(receiver.url)
    page.get_by_label("Description").fill("Orders service")
    page.get_by_label("payment.succeeded").check()
    page.get_by_label("ping").check()
    page.get_by_role("button", name="Create endpoint").click()
    expect(page.get_by_role("status")).to_contain_text("Endpoint created")
    secret = page.get_by_role("textbox", name="Signing secret")
    expect(secret).to_have_value(re.compile(r"^whsec_"))
    page.get_by_role("button", name="Copy").click()
    expect(page.get_by_role("status")).to_have_text("Secret copied to the clipboard.")
    assert page.evaluate("navigator.clipboard.readText()") == secret.input_value()
    page.get_by_role("button", name="Done").click()
    expect(secret).to_be_hidden()

    page.get_by_role("link", name=receiver.url).click()
    expect(page.get_by_role("heading", name=receiver.url)).to_be_focused()
    page.get_by_role("button", name="Send test event").click()
    expect(page.get_by_role("status")).to_have_text("Test event sent.")
    delivery = page.locator("#delivery-list .card").first
    expect(delivery).to_contain_text("failed", timeout=20_000)  # the receiver answers 500

    delivery.get_by_role("link", name="ping").click()
    expect(page.get_by_role("heading", name="Delivery of ping")).to_be_visible()
    expect(page.locator("#delivery-request")).to_contain_text('"type": "ping"')
    attempts = page.locator("#attempt-list > li")
    expect(attempts).to_have_count(1)
    expect(attempts.first).to_contain_text("HTTP 500")
    expect(attempts.first).to_contain_text("not yet, sorry")

    receiver.accepting = True
    page.get_by_role("button", name="Retry", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("Retry queued")
    expect(page.locator("#delivery-facts")).to_contain_text("succeeded", timeout=20_000)
    expect(attempts).to_have_count(2)
    expect(attempts.first).to_contain_text("HTTP 204")
    # The view refreshed itself while the retry was pending; the focus stayed on the button.
    expect(page.get_by_role("button", name="Retry", exact=True)).to_be_focused()

    # Another account's endpoint is not there for this token, even asked for by id.
    status = page.evaluate(
        """async (id) => (await fetch(`/v1/webhook-endpoints/${id}`, {headers: {
            authorization: `Bearer ${sessionStorage.getItem("ustun.portal.token")}`}})).status""",
        theirs,
    )
    assert status == 404
    page.get_by_role("link", name="← Endpoint").click()

    page.get_by_role("button", name="Edit").click()
    page.get_by_label("Description").fill("Orders service, EU")
    page.get_by_role("button", name="Save changes").click()
    expect(page.get_by_role("status")).to_have_text("Endpoint saved.")
    expect(page.locator("#endpoint-facts")).to_contain_text("Orders service, EU")

    page.get_by_role("button", name="Disable").click()
    expect(page.get_by_role("status")).to_contain_text("Endpoint disabled")
    expect(page.locator("#endpoint-facts")).to_contain_text("Disabled")
    page.get_by_role("button", name="Enable").click()
    expect(page.get_by_role("status")).to_have_text("Endpoint enabled.")

    first = secret.input_value() if secret.is_visible() else None
    page.get_by_role("button", name="Rotate secret").click()
    expect(page.get_by_role("status")).to_contain_text("old one keeps signing for 24 hours")
    expect(secret).to_have_value(re.compile(r"^whsec_"))
    assert secret.input_value() != first

    since = (datetime.now(UTC) - timedelta(hours=1)).astimezone().strftime("%Y-%m-%dT%H:%M")
    page.get_by_label("Re-send failed deliveries since").fill(since)
    page.get_by_role("button", name="Recover").click()
    expect(page.get_by_role("status")).to_contain_text("re-sent")

    page.get_by_role("link", name="Event catalog").click()
    expect(page.get_by_role("heading", name="Event catalog")).to_be_focused()
    entry = page.locator("#catalog-list article", has_text="payment.succeeded")
    entry.get_by_text("Schema").click()
    expect(entry.locator("pre").first).to_contain_text('"title": "PaymentData"')
    expect(page.get_by_text("GLOBEX ONLY")).to_have_count(0)


def test_the_links_event_types_narrow_the_form_and_catalogue(page: Page, service: Portal) -> None:
    page.goto(service.link("acme", event_types=["payment.failed", "ping"])["url"])
    page.get_by_role("button", name="Add endpoint").click()
    choices = page.locator("#endpoint-event-choices input")
    expect(choices).to_have_count(2)
    page.get_by_role("link", name="Event catalog").click()
    expect(page.locator("#catalog-list article")).to_have_count(2)


def test_bad_input_is_announced_and_nothing_is_made(page: Page, service: Portal) -> None:
    page.goto(service.link("acme")["url"])
    page.get_by_role("button", name="Add endpoint").click()
    page.get_by_label("URL").fill("ftp://example.com/hook")
    page.get_by_label("ping").check()
    page.get_by_role("button", name="Create endpoint").click()
    expect(page.get_by_role("status")).to_contain_text("body.url")
    page.get_by_label("ping").uncheck()
    page.get_by_role("button", name="Create endpoint").click()
    expect(page.get_by_role("status")).to_have_text("Choose at least one event to receive.")


def test_the_keyboard_reaches_every_control(page: Page, service: Portal) -> None:
    page.goto(service.link("acme")["url"])
    expect(page.get_by_role("heading", name="Endpoints")).to_be_focused()
    for _ in range(10):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent") == "Add endpoint":
            break
    page.keyboard.press("Enter")
    expect(page.get_by_label("URL")).to_be_focused()
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline == "solid"


def test_an_expired_link_shows_why_it_cannot_be_used(page: Page, service: Portal) -> None:
    session = service.link("acme", ttl=60)

    async def expire() -> None:  # as if its minute had passed
        db = Database(service.database_url)
        try:
            async with db.unit_of_work() as uow:
                await uow.conn.execute(
                    update(portal_sessions)
                    .where(portal_sessions.c.id == session["id"])
                    .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
                )
        finally:
            await db.dispose()

    off_loop(lambda: asyncio.run(expire()))
    page.goto(session["url"])
    _refused(page, "expired")


def test_a_revoked_link_stops_working_at_once(page: Page, service: Portal) -> None:
    session = service.link("acme")
    page.goto(session["url"])
    expect(page.get_by_role("heading", name="Endpoints")).to_be_visible()
    with service.http(service.operator) as http:
        assert http.delete(f"/v1/portal-sessions/{session['id']}").status_code == 204
    page.get_by_role("link", name="Event catalog").click()
    _refused(page, "revoked")
    page.reload()  # the token went with the refusal
    _refused(page, "needs a portal link")


def test_a_forged_or_missing_link_shows_why(page: Page, service: Portal) -> None:
    page.goto(f"{service.server.base_url}/portal/#token=ptl_{'A' * 43}")
    _refused(page, "Unknown portal link")
    page.goto(f"{service.server.base_url}/portal/")
    _refused(page, "needs a portal link")


def test_the_portal_works_inside_another_sites_iframe(browser: Browser, service: Portal) -> None:
    link = service.link("acme")["url"]
    page_html = (
        f'<!doctype html><title>App</title><iframe src="{link}" title="Webhooks" '
        'width="800" height="600"></iframe>'
    ).encode()

    class Host(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(page_html)))
            self.end_headers()
            self.wfile.write(page_html)

        def log_message(self, *args: object) -> None:
            pass

    host = ThreadingHTTPServer(("127.0.0.1", 0), Host)
    threading.Thread(target=host.serve_forever, daemon=True).start()
    context = browser.new_context()
    try:
        page = context.new_page()
        # Another origin: `localhost` is not `127.0.0.1`, where ustun serves.
        page.goto(f"http://localhost:{host.server_address[1]}/")
        frame = page.frame_locator("iframe")
        expect(frame.get_by_role("heading", name="Endpoints")).to_be_visible()
        frame.get_by_role("link", name="Event catalog").click()
        expect(frame.get_by_role("heading", name="Event catalog")).to_be_visible()
    finally:
        context.close()
        host.shutdown()
        host.server_close()


def test_the_page_sends_its_security_headers(service: Portal) -> None:
    answer = httpx.get(f"{service.server.base_url}/portal/")
    assert answer.status_code == 200
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "connect-src 'self'" in policy
    assert "frame-ancestors" not in policy
    assert "x-frame-options" not in answer.headers
    assert answer.headers["referrer-policy"] == "no-referrer"
    assert '<script src="/portal/static/portal.js"' in answer.text
    assert not re.search(r'(src|href)="(https?:)?//', answer.text)  # no external asset


def _overflow(page: Page) -> list[str]:
    """What is wider than the viewport: the page, or any element inside it."""
    found: list[str] = page.evaluate(
        """() => {
            const found = [];
            const root = document.documentElement;
            if (root.scrollWidth > window.innerWidth) found.push(`page ${root.scrollWidth}`);
            for (const node of document.querySelectorAll("main *")) {
                const box = node.getBoundingClientRect();
                if (box.width && box.right > window.innerWidth + 1) {
                    found.push(`${node.tagName}#${node.id} ${Math.round(box.right)}`);
                }
            }
            return found.slice(0, 5);
        }"""
    )
    return found


def _screenshot(page: Page, name: str, tmp_path: Path) -> None:
    """The whole page on a wide screen, the first screenful on a phone, in 256 colours."""
    target = SCREENSHOTS if os.environ.get("USTUN_UPDATE_SCREENSHOTS") else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    wide = (page.viewport_size or DESKTOP)["width"] >= DESKTOP["width"]
    taken = Image.open(io.BytesIO(page.screenshot(full_page=wide)))
    taken.convert("RGB").quantize(256).save(target / f"{name}.png", optimize=True)


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390", "1280"])
def test_every_view_fits_the_screen(
    browser: Browser,
    service: Portal,
    receiver: Receiver,
    viewport: dict[str, int],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    with service.http(service.acme) as acme:
        made = acme.post(
            "/v1/webhook-endpoints",
            json={
                "url": f"{receiver.url}/a-rather-long-path/for-the-orders-service?tenant=acme",
                "events": ["payment.succeeded", "payment.failed", "ping"],
                "description": "Orders service (production)",
            },
        ).json()
        acme.post(f"/v1/webhook-endpoints/{made['id']}/test")
        wait_for(
            lambda: (
                acme.get("/v1/deliveries", params={"endpoint_id": made["id"]}).json()["data"][0][
                    "status"
                ]
                == "failed"
            ),
            what="the test ping's failed attempt",
        )
    context = browser.new_context(viewport=viewport)  # type: ignore[arg-type]
    try:
        page = context.new_page()
        page.goto(service.link("acme")["url"])
        expect(page.get_by_role("heading", name="Endpoints")).to_be_visible()
        assert _overflow(page) == []
        page.get_by_role("link", name=made["url"]).click()
        expect(page.locator("#delivery-list .card").first).to_contain_text("failed")
        assert _overflow(page) == []
        backend = request.node.callspec.params.get("service", "sqlite")
        if backend == "sqlite":
            _screenshot(page, f"portal-{viewport['width']}", tmp_path)
        page.locator("#delivery-list .card a").first.click()
        expect(page.locator("#attempt-list > li")).to_have_count(1)
        assert _overflow(page) == []
        page.get_by_role("link", name="Event catalog").click()
        page.locator("#catalog-list summary").first.click()
        assert _overflow(page) == []
    finally:
        context.close()
