"""Helpers of the dashboard tests: log in through the form like a browser does."""

from __future__ import annotations

import re

import httpx

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


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
