"""The consumer portal at `/portal/`: one static page, its script and its style, no other asset.

The page reads a portal link's token from the URL's fragment (`#token=ptl_…`, never sent to a
server), keeps it in the tab's session storage, and calls the `/v1` webhook API with it as a
bearer token: no cookie, so no cross-site request can act for its holder (CSRF), and it works
inside another site's iframe. Its Content-Security-Policy admits scripts, styles and requests
from this server only; framing is allowed, since the portal is made to be embedded.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from ustun.portal import PORTAL_PATH
from ustun.service.plumbing.response_headers import PrefixHeaders

HERE = Path(__file__).parent
STATIC = HERE / "static"
# Everything from this server only, nothing inline; no `frame-ancestors`: apps embed it.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; object-src 'none'"
    ),
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
}


# Added by the plumbing to every answer under the portal's path.
HEADERS = PrefixHeaders(PORTAL_PATH.rstrip("/"), SECURITY_HEADERS, overwrite=True)


async def page() -> Response:
    """The portal's one page; what it shows comes from the API."""
    return FileResponse(STATIC / "index.html", headers={"cache-control": "no-cache"})


async def without_slash() -> Response:
    """`/portal` → `/portal/` (the browser keeps the fragment, and so the token)."""
    return RedirectResponse(PORTAL_PATH, status_code=308)


def install(app: FastAPI) -> None:
    """Serve the portal page, its static files and its security headers on `app`."""
    app.add_api_route(PORTAL_PATH, page, methods=["GET", "HEAD"], include_in_schema=False)
    app.add_api_route(
        PORTAL_PATH.rstrip("/"), without_slash, methods=["GET", "HEAD"], include_in_schema=False
    )
    app.mount(f"{PORTAL_PATH}static", StaticFiles(directory=STATIC), name="portal-static")
