"""Dashboard login, logout, CSRF and the overview, over HTTP."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest
from fastapi import FastAPI
from pydantic import ValidationError

from dashboard_support import csrf_of, log_in
from ustun.service import create_app
from ustun.service.dashboard.session import COOKIE
from ustun.service.plumbing.accounts import create_key
from ustun.settings import Settings
from ustun.store import Database


async def test_pages_need_a_login(browser: httpx.AsyncClient) -> None:
    response = await browser.get("/dashboard")
    assert response.status_code == 303
    assert response.headers["location"] == "/dashboard/login"


async def test_login_sets_a_session_that_holds_no_key(
    browser: httpx.AsyncClient, api_key: str
) -> None:
    await log_in(browser, api_key)
    cookie = browser.cookies[COOKIE]
    assert api_key not in cookie
    assert api_key.removeprefix("ustun_sk_")[:12] not in cookie
    page = await browser.get("/dashboard")
    assert page.status_code == 200
    assert "Overview" in page.text
    assert "Log out" in page.text


async def test_a_wrong_key_is_refused(browser: httpx.AsyncClient) -> None:
    form = await browser.get("/dashboard/login")
    response = await browser.post(
        "/dashboard/login", data={"api_key": "ustun_sk_nope", "csrf_token": csrf_of(form.text)}
    )
    assert response.status_code == 200
    assert "not valid" in response.text
    assert (await browser.get("/dashboard")).status_code == 303


async def test_posts_without_the_csrf_token_are_refused(
    browser: httpx.AsyncClient, api_key: str
) -> None:
    await browser.get("/dashboard/login")
    forged = await browser.post("/dashboard/login", data={"api_key": api_key})
    assert forged.status_code == 403
    assert forged.json()["type"].endswith("/problems/csrf-failed")

    csrf = await log_in(browser, api_key)
    forged_token = ("y" if csrf[0] == "x" else "x") + csrf[1:]  # differs in its first character
    for token in ({}, {"csrf_token": forged_token}):
        refused = await browser.post("/dashboard/logout", data=token)
        assert refused.status_code == 403
    assert (await browser.get("/dashboard")).status_code == 200


async def test_logout_ends_the_session(browser: httpx.AsyncClient, api_key: str) -> None:
    csrf = await log_in(browser, api_key)
    response = await browser.post("/dashboard/logout", data={"csrf_token": csrf})
    assert response.status_code == 303
    assert (await browser.get("/dashboard")).status_code == 303


async def test_a_forged_cookie_is_not_a_session(browser: httpx.AsyncClient) -> None:
    browser.cookies.set(COOKIE, "eyJjc3JmIjoieCIsImFjY291bnQiOiJhY2N0XzEifQ.forged.sig")
    assert (await browser.get("/dashboard")).status_code == 303


async def test_static_files_are_served_locally(browser: httpx.AsyncClient) -> None:
    script = await browser.get("/dashboard/static/htmx-2.0.11.min.js")
    assert script.status_code == 200
    assert "htmx" in script.text
    page = (await browser.get("/dashboard/login")).text
    assert "http://" not in page.replace("http://testserver", "")
    assert "https://" not in page


async def test_the_favicon_is_served_from_the_package(browser: httpx.AsyncClient) -> None:
    icon = await browser.get("/favicon.ico")
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/x-icon"
    assert icon.content.startswith(b"\x00\x00\x01\x00")  # an ICO header
    assert '<link rel="icon" href="/favicon.ico">' in (await browser.get("/dashboard/login")).text


async def test_each_account_sees_only_its_own_figures(app: FastAPI, api_key: str) -> None:
    other_key = await create_key(app.state.db, f"other-{uuid.uuid4().hex[:8]}")
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as first,
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as second,
    ):
        await log_in(first, api_key)
        await log_in(second, other_key)
        assert first.cookies[COOKIE] != second.cookies[COOKIE]
        assert (await first.get("/dashboard")).status_code == 200
        assert (await second.get("/dashboard")).status_code == 200


async def test_a_copied_cookie_stops_working_at_logout(app: FastAPI, api_key: str) -> None:
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as owner,
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as thief,
    ):
        csrf = await log_in(owner, api_key)
        thief.cookies.set(COOKIE, owner.cookies[COOKIE], path="/dashboard")
        assert (await thief.get("/dashboard")).status_code == 200

        assert (await owner.post("/dashboard/logout", data={"csrf_token": csrf})).status_code == 303
        for path in ("/dashboard", "/dashboard/endpoints", "/dashboard/deliveries"):
            page = await thief.get(path)
            assert page.status_code == 303, path
            assert page.headers["location"] == "/dashboard/login"
        posted = await thief.post(
            "/dashboard/endpoints",
            data={"csrf_token": csrf, "url": "https://hooks.example.com/x", "events": "*"},
        )
        assert posted.status_code == 303
        assert posted.headers["location"] == "/dashboard/login"
        listed = await owner.get(
            "/v1/webhook-endpoints", headers={"authorization": f"Bearer {api_key}"}
        )
        assert listed.json()["data"] == []


async def test_logging_in_again_ends_the_previous_session(app: FastAPI, api_key: str) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as browser:
        await log_in(browser, api_key)
        first = browser.cookies[COOKIE]
        await log_in(browser, api_key)
        assert browser.cookies[COOKIE] != first
        browser.cookies.set(COOKIE, first, path="/dashboard")
        assert (await browser.get("/dashboard")).status_code == 303


async def test_pages_forbid_framing_and_inline_script(
    browser: httpx.AsyncClient, api_key: str
) -> None:
    await log_in(browser, api_key)
    for path in ("/dashboard/login", "/dashboard", "/dashboard/events", "/dashboard/nope"):
        response = await browser.get(path)
        csp = response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp, path
        assert "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "same-origin"
    html = (await browser.get("/dashboard/events")).text
    assert not re.search(r"<script(?![^>]*\bsrc=)", html), "inline script"
    assert not re.search(r"\son[a-z]+=|\sstyle=", html), "inline handler or style"
    assert "content-security-policy" not in (await browser.get("/healthz")).headers


def _cookie_of(response: httpx.Response) -> str:
    return next(c for c in response.headers.get_list("set-cookie") if c.startswith(COOKIE))


@pytest.mark.parametrize(
    ("trusted", "secure"), [("10.0.0.0/8, 192.0.2.1", True), ("192.0.2.1", False), ("", False)]
)
async def test_the_cookie_is_secure_behind_a_trusted_tls_proxy_only(
    settings: Settings, db: Database, trusted: str, secure: bool
) -> None:
    app = create_app(settings.model_copy(update={"trusted_proxies": trusted}), db=db)
    transport = httpx.ASGITransport(app=app, client=("10.1.2.3", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as proxied:
        form = await proxied.get("/dashboard/login", headers={"x-forwarded-proto": "https"})
    assert ("; secure" in _cookie_of(form).lower()) is secure


async def test_trusted_proxies_must_be_addresses() -> None:
    with pytest.raises(ValidationError, match="not an IP address"):
        Settings(trusted_proxies="10.0.0.0/8, proxy.internal")


async def test_failed_logins_from_one_address_get_429(
    settings: Settings, db: Database, api_key: str
) -> None:
    strict = settings.model_copy(update={"auth_failure_limit": 2, "trusted_proxies": "10.0.0.1"})
    app = create_app(strict, db=db)
    transport = httpx.ASGITransport(app=app, client=("10.0.0.1", 50000))
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as guesser,
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as neighbour,
    ):
        guesser.headers["x-forwarded-for"] = "203.0.113.5"
        neighbour.headers["x-forwarded-for"] = "203.0.113.6"
        csrf = csrf_of((await guesser.get("/dashboard/login")).text)
        for _ in range(2):
            wrong = await guesser.post(
                "/dashboard/login", data={"api_key": "ustun_sk_guess", "csrf_token": csrf}
            )
            assert wrong.status_code == 200
        refused = await guesser.post(
            "/dashboard/login", data={"api_key": "ustun_sk_guess", "csrf_token": csrf}
        )
        assert refused.status_code == 429
        assert refused.json()["type"].endswith("/problems/rate-limited")
        assert int(refused.headers["retry-after"]) >= 1
        # The proxy's other client is counted on its own (X-Forwarded-For from a trusted proxy).
        await log_in(neighbour, api_key)
