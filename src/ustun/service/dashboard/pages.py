"""Dashboard pages that need no pillar: login, logout and the overview."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response

from ustun.service.dashboard.overview import overview
from ustun.service.dashboard.session import end_session, new_session, open_session
from ustun.service.dashboard.web import LoggedIn, Posting, check_csrf, codec, page, see_other
from ustun.service.operations import webhook_deliveries
from ustun.service.plumbing.accounts import authenticate
from ustun.service.plumbing.auth_failures import FailureLimiter
from ustun.webhooks.states import Status

DEAD_LETTERS_SHOWN = 5

router = APIRouter(prefix="/dashboard", include_in_schema=False)


@router.get("/login")
async def login_form(request: Request) -> Response:
    """The login form; starts an anonymous session so that the form carries a CSRF token."""
    session = codec(request).read(request) or new_session()
    response = page(request, "login.html", None, csrf=session.csrf, error=None)
    codec(request).write(request, response, session)
    return response


@router.post("/login")
async def login(request: Request, api_key: Annotated[str, Form(max_length=200)] = "") -> Response:
    """Exchange an API key for a new server-side session (the key is not kept).

    Past the limit of failed logins (and bearer checks) of an address, a wrong key gets 429
    `rate-limited`; a valid one still logs in.
    """
    session = codec(request).read(request)
    await check_csrf(request, session)
    assert session is not None
    db = request.app.state.db
    credential = await authenticate(db, api_key.strip()) if api_key.strip() else None
    if credential is None:
        failures: FailureLimiter = request.app.state.auth_failures
        refusal = failures.failed(request.client.host if request.client else None)
        if refusal is not None:
            raise refusal
        return page(
            request, "login.html", None, csrf=session.csrf, error="That API key is not valid."
        )
    if session.id is not None:
        await end_session(db, session.id)
    response = see_other("/dashboard")
    codec(request).write(request, response, new_session(await open_session(db, credential)))
    return response


@router.post("/logout")
async def logout(request: Request, who: Posting) -> Response:
    """End the session server-side, so a copy of its cookie no longer works either."""
    assert who.session.id is not None
    await end_session(request.app.state.db, who.session.id)
    response = see_other("/dashboard/login")
    codec(request).clear(response)
    return response


@router.get("")
async def home(request: Request, who: LoggedIn) -> Response:
    """Overview: counts by status, dead letters and queue lag of the logged-in account."""
    db = request.app.state.db
    async with db.read(snapshot=True) as conn:
        figures = await overview(db, conn, who.account.id)
    dead = await webhook_deliveries.deliveries_page(
        db, who.account.id, limit=DEAD_LETTERS_SHOWN, cursor=None, status=Status.DEAD
    )
    return page(request, "overview.html", who, nav="overview", figures=figures, dead=dead)
