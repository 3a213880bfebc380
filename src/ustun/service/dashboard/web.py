"""What every dashboard page shares: templates, the logged-in viewer, CSRF checks, redirects."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from ustun.clock import rfc3339
from ustun.errors import ProblemError, UstunError
from ustun.service.dashboard.session import CSRF_FIELD, Session, SessionCodec, session_account
from ustun.service.plumbing.accounts import Account

HERE = Path(__file__).parent
FAVICON = HERE / "static" / "favicon.ico"
templates = Jinja2Templates(directory=HERE / "templates")
templates.env.filters["rfc3339"] = rfc3339
# The dashboard's sections, in navigation order.
templates.env.globals["sections"] = ["overview", "endpoints", "events", "deliveries", "jobs"]


# Every dashboard response: no script, style or frame from anywhere but here (htmx and
# dashboard.js are static files), never framed (clickjacking), no URL leaked to other sites.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; object-src 'none'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "x-content-type-options": "nosniff",
}


class LoginRequired(UstunError):
    """Raised by `viewer` when no one is logged in; answered with a redirect to the login."""


@dataclass(frozen=True, slots=True)
class Viewer:
    """The logged-in account and its session (for the CSRF token of the page's forms)."""

    account: Account
    session: Session


def codec(request: Request) -> SessionCodec:
    """The app's session cookie codec."""
    value: SessionCodec = request.app.state.dashboard_sessions
    return value


async def viewer(request: Request) -> Viewer:
    """The logged-in viewer of this request; redirects to the login page when there is none."""
    session = codec(request).read(request)
    if session is None or session.id is None:
        raise LoginRequired
    account = await session_account(request.app.state.db, session.id)
    if account is None:
        raise LoginRequired
    return Viewer(account, session)


async def check_csrf(request: Request, session: Session | None) -> None:
    """Refuse (403 `csrf-failed`) a POST whose form lacks this session's token."""
    value = (await request.form()).get(CSRF_FIELD)
    presented = value if isinstance(value, str) else None
    if session is None or not session.csrf_matches(presented):
        raise ProblemError("csrf-failed", "Reload the page and submit the form again.")


async def poster(request: Request, who: Annotated[Viewer, Depends(viewer)]) -> Viewer:
    """The logged-in viewer of a POST whose CSRF token checked out."""
    await check_csrf(request, who.session)
    return who


LoggedIn = Annotated[Viewer, Depends(viewer)]
Posting = Annotated[Viewer, Depends(poster)]


def page(request: Request, template: str, who: Viewer | None, **context: Any) -> HTMLResponse:
    """Render a page; its forms get the session's CSRF token."""
    csrf = who.session.csrf if who is not None else context.pop("csrf", "")
    return templates.TemplateResponse(
        request,
        template,
        {"account": who.account if who else None, "csrf": csrf, **context},
    )


async def favicon() -> Response:
    """The icon browsers fetch from `/favicon.ico` on their own, served from the package."""
    return FileResponse(
        FAVICON, media_type="image/x-icon", headers={"cache-control": "max-age=86400"}
    )


def see_other(url: str) -> Response:
    """303 to `url` after a POST (Post/Redirect/Get)."""
    return RedirectResponse(url, status_code=303)


async def on_login_required(request: Request, exc: Exception) -> Response:
    """Send a visitor who is not logged in to the login page (htmx: via `HX-Redirect`)."""
    if request.headers.get("hx-request"):
        return Response(status_code=204, headers={"hx-redirect": "/dashboard/login"})
    return see_other("/dashboard/login")
