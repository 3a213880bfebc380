"""Dashboard login, logout, CSRF and the overview, over HTTP."""

from __future__ import annotations

import uuid

import httpx
from fastapi import FastAPI

from dashboard_support import csrf_of, log_in
from ustun.service.accounts import create_key
from ustun.service.dashboard.session import COOKIE


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
