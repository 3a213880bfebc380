"""`/docs` in a real headless Chromium with every other origin cut off: Swagger UI renders the
operations from the package's own assets, under the page's `script-src 'self'` policy.

SQLite only: the page reads no stored data, so the backend makes no difference to it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Route, expect

from support import Server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("api-docs")
    running = Server(f"sqlite:///{tmp / 'ustun.db'}", tmp / "serve.log").start()
    try:
        yield running
    finally:
        running.stop()


def test_docs_renders_the_operations_offline_under_its_csp(
    browser: Browser, server: Server
) -> None:
    context = browser.new_context()
    refused: list[str] = []

    def only_the_server(route: Route) -> None:
        if route.request.url.startswith(f"{server.base_url}/"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    context.route("**/*", only_the_server)
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    try:
        answer = page.goto(f"{server.base_url}/docs")
        assert answer is not None
        assert "script-src 'self'" in answer.headers["content-security-policy"]
        operations = page.locator(".opblock-summary-path")
        expect(operations.filter(has_text="/v1/payments").first).to_be_visible(timeout=20_000)
        expect(
            page.locator(".opblock-summary-method").filter(has_text="PATCH").first
        ).to_be_visible()
        assert operations.count() >= 20
    finally:
        context.close()
    assert refused == []
    assert problems == []
