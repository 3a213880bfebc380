"""Issue 28's dashboard items in a real headless Chromium (Debian's, driven by Playwright) on
`ustun serve`: the endpoint form's ordering, window, rate limit and broker kinds; event patterns
that never break inside at 1280 px; `/problems` in the dashboard's look."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from browser_support import (
    DESKTOP,
    new_key,
    served,
)
from support import (
    BACKENDS,
    Server,
)

pytestmark = pytest.mark.e2e

# A URL longer than the table's column can hold, so the table squeezes its other columns.
LONG_URL = "http://127.0.0.1:9/" + "/".join(f"orders-service-{n}-incoming-hooks" for n in range(8))
PATTERNS = ["payment.*", "transfer.completed"]


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
    with served(request.param, tmp_path_factory.mktemp("forms")) as (server, url, key):
        yield Service(server, key, url)


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=DESKTOP)
    yield context.new_page()
    context.close()


def log_in(page: Page, service: Service, key: str | None = None) -> None:
    page.goto(f"{service.server.base_url}/dashboard/login")
    page.get_by_label("API key").fill(key or service.key)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


def test_the_endpoint_form_sets_ordering_window_and_rate_limit(
    page: Page, service: Service
) -> None:
    log_in(page, service)
    page.get_by_role("link", name="Endpoints").click()
    kinds = page.get_by_label("Kind").locator("option").all_inner_texts()
    assert kinds == ["http", "rabbitmq", "nats"]
    page.get_by_label("URL", exact=True).fill(LONG_URL)
    page.get_by_label("Events").fill(" ".join(PATTERNS))
    page.get_by_label("Ordering").select_option("fifo")
    expect(page.get_by_label("Max in flight")).to_have_value("8")
    page.get_by_label("Max in flight").fill("4")
    page.get_by_label("Rate limit").fill("1.5")
    page.get_by_role("button", name="Create endpoint").click()
    expect(page.locator("[data-secret]")).to_contain_text("whsec_")

    page.locator("[data-created] a").click()
    details = page.locator(".details")
    expect(details).to_contain_text("fifo")
    expect(details.locator("dt:text-is('Max in flight') + dd")).to_have_text("4")
    expect(details.locator("dt:text-is('Rate limit') + dd")).to_have_text("1.5 per second")


def test_a_refused_value_shows_the_apis_message(page: Page, service: Service) -> None:
    log_in(page, service)
    page.goto(f"{service.server.base_url}/dashboard/endpoints")
    page.get_by_label("URL", exact=True).fill("http://127.0.0.1:9/refused")
    page.get_by_label("Max in flight").fill("0")
    page.get_by_role("button", name="Create endpoint").click()
    expect(page.get_by_role("alert")).to_have_text(
        "max_in_flight: Input should be greater than or equal to 1"
    )


# How many lines each occurrence of `needle` in an Events cell takes (a Range's client rects
# have one top per line it is laid out on), whatever element holds the text.
LINES_OF = """(needle) => {
    const lines = [];
    for (const cell of document.querySelectorAll('td[data-label="Events"]')) {
        const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            let at = node.data.indexOf(needle);
            for (; at >= 0; at = node.data.indexOf(needle, at + 1)) {
                const range = document.createRange();
                range.setStart(node, at);
                range.setEnd(node, at + needle.length);
                const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
                lines.push(tops.size);
            }
        }
    }
    return lines;
}"""


def test_an_event_pattern_never_breaks_inside_at_1280_px(page: Page, service: Service) -> None:
    """The endpoints table beside long URLs: with only `payment.*` in its Events column (the
    issue's case), then with a longer list too."""
    key = service.new_key("squeezed")  # an account of its own: only these endpoints listed

    def add(events: list[str]) -> None:
        made = httpx.post(
            f"{service.server.base_url}/v1/webhook-endpoints",
            json={"url": LONG_URL, "events": events, "description": "squeezed"},
            headers={"authorization": f"Bearer {key}"},
        )
        assert made.status_code == 201, made.text

    def lines() -> dict[str, list[int]]:
        page.goto(f"{service.server.base_url}/dashboard/endpoints")
        assert page.evaluate("document.documentElement.scrollWidth") <= DESKTOP["width"]
        return {pattern: page.evaluate(LINES_OF, pattern) for pattern in PATTERNS}

    log_in(page, service, key)
    add(["payment.*"])
    add(["payment.*"])
    assert lines() == {"payment.*": [1, 1], "transfer.completed": []}
    add(PATTERNS)
    assert lines() == {"payment.*": [1, 1, 1], "transfer.completed": [1]}


@pytest.mark.parametrize("path", ["/problems", "/problems/precondition-invalid"])
def test_the_problem_pages_wear_the_dashboards_stylesheet(
    page: Page, service: Service, path: str
) -> None:
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    answer = page.goto(service.server.base_url + path)
    assert answer is not None
    assert answer.status == 200
    page.wait_for_load_state()
    assert page.evaluate("getComputedStyle(document.body).fontFamily").startswith("system-ui")
    main = page.locator("main")
    expect(main).to_have_css("max-width", "1216px")  # 76rem
    expect(main.locator("section.card").first).to_have_css("border-radius", "8px")
    assert any(url.endswith("/dashboard/static/dashboard.css") for url in fetched), fetched
    outside = [u for u in fetched if not u.startswith(service.server.base_url)]
    assert outside == []
    assert re.search(r"· ustun$", page.title())
