"""Helpers of the dashboard tests: log in through the form like a browser does."""

from __future__ import annotations

import re

import httpx

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
SECRET = re.compile(r"whsec_[A-Za-z0-9+/=]+")
ENDPOINT = re.compile(r"/dashboard/endpoints/(we_[A-Za-z0-9]+)")


def csrf_of(html: str) -> str:
    """The CSRF token a page's forms carry."""
    match = CSRF.search(html)
    assert match, "no CSRF token on the page"
    return match.group(1)


async def log_in(http: httpx.AsyncClient, api_key: str) -> str:
    """Log `http` in with `api_key` through the login form; return the session's CSRF token."""
    form = await http.get("/dashboard/login")
    response = await http.post(
        "/dashboard/login", data={"api_key": api_key, "csrf_token": csrf_of(form.text)}
    )
    assert response.status_code == 303, response.text
    return csrf_of((await http.get("/dashboard")).text)


async def create_endpoint(browser: httpx.AsyncClient, csrf: str, url: str) -> tuple[str, str]:
    """Create an endpoint through the dashboard form; return its id and the secret shown."""
    created = await browser.post(
        "/dashboard/endpoints",
        data={"csrf_token": csrf, "url": url, "events": "payment.* ping", "payload": "full"},
    )
    assert created.status_code == 200, created.text
    secret = SECRET.search(created.text)
    endpoint = ENDPOINT.search(created.text)
    assert secret, created.text
    assert endpoint, created.text
    return endpoint.group(1), secret.group()
