"""The dashboard at `/dashboard`: server-rendered pages behind an API-key login."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from ustun.service.dashboard import job_pages, pages, webhook_pages
from ustun.service.dashboard.session import SessionCodec, derive_key
from ustun.service.dashboard.web import (
    HERE,
    SECURITY_HEADERS,
    LoginRequired,
    favicon,
    on_login_required,
)
from ustun.service.plumbing.response_headers import PrefixHeaders

# Added by the plumbing to errors and redirects too: the pages' own headers never weaken these.
HEADERS = PrefixHeaders("/dashboard", SECURITY_HEADERS, overwrite=True)


def install(app: FastAPI, secret_key: str | None) -> None:
    """Add the dashboard's pages, static files (vendored, works offline), icon and CSP to `app`."""
    app.state.dashboard_sessions = SessionCodec(derive_key(secret_key))
    app.add_exception_handler(LoginRequired, on_login_required)
    app.include_router(pages.router)
    app.include_router(webhook_pages.router)
    app.include_router(job_pages.router)
    app.add_api_route("/favicon.ico", favicon, include_in_schema=False)
    app.mount("/dashboard/static", StaticFiles(directory=HERE / "static"), name="dashboard-static")
