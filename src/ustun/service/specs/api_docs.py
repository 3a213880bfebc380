"""`/docs`: Swagger UI from assets vendored in the package, so it works offline and under a
Content-Security-Policy of `script-src 'self'` (see api_docs_static/VENDORED.md)."""

from __future__ import annotations

import html
import re
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "api_docs_static"
STATIC_PATH = "/docs/static"
# Scripts only from this origin (no inline script, no eval); nothing may frame the page.
CONTENT_SECURITY_POLICY = (
    "script-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
# The inline script FastAPI's page ends with; `swagger-init.js` does the same from a file.
_INLINE_SCRIPT = re.compile(r"<script>.*?</script>", re.DOTALL)


def page(openapi_url: str, title: str) -> str:
    """The Swagger UI page: FastAPI's, with its inline start-up script replaced by a file."""
    body = bytes(
        get_swagger_ui_html(
            openapi_url=openapi_url,
            title=title,
            swagger_js_url=f"{STATIC_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{STATIC_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{STATIC_PATH}/favicon-32x32.png",
        ).body
    ).decode()
    init = (
        f'<script src="{STATIC_PATH}/swagger-init.js" '
        f'data-openapi-url="{html.escape(openapi_url)}"></script>'
    )
    replaced, count = _INLINE_SCRIPT.subn(lambda _: init, body)
    if count != 1:
        raise RuntimeError("FastAPI's Swagger UI page changed shape: expected one inline script")
    return replaced


def install(app: FastAPI, openapi_url: str = "/openapi.json") -> None:
    """Serve `/docs` and its static assets; the app must be built with `docs_url=None`."""
    text = page(openapi_url, f"{app.title} — API reference")
    app.mount(STATIC_PATH, StaticFiles(directory=STATIC), name="api-docs-static")

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return HTMLResponse(text, headers={"content-security-policy": CONTENT_SECURITY_POLICY})
