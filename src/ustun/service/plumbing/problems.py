"""Render every error as RFC 9457 problem+json, and serve the human page of each problem type.

A database outage (down or restarting, too slow, out of disk) is answered by the plumbing
(`pipeline.Plumbing`) wherever in the request it is met, as 503 or 507 with Retry-After.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ustun.errors import ProblemError
from ustun.http.problem import CATALOGUE, MEDIA_TYPE, ProblemType, encode, problem
from ustun.http.retry_after import format_retry_after
from ustun.service.plumbing.bodies import unreadable
from ustun.store.reach import OUTAGE_PROBLEMS, Outage
from ustun.webhooks.endpoint_body import field_message

log = logging.getLogger("ustun.service")

# Statuses Starlette or FastAPI raise on their own, and the problem type each becomes.
_SLUG_BY_STATUS = {
    400: "bad-request",
    401: "unauthorized",
    404: "not-found",
    405: "method-not-allowed",
    413: "payload-too-large",
    415: "unsupported-media-type",
}


def request_id(request: Request) -> str:
    """The id the request-id middleware gave this request."""
    return str(request.scope.get("state", {}).get("request_id", "req_unknown"))


def problem_response(
    request: Request,
    slug: str,
    detail: str,
    *,
    status: int | None = None,
    title: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extensions: Any,
) -> Response:
    """A problem+json response: `type` resolves on this server, `instance` names the request."""
    body = problem(
        slug,
        detail,
        base=str(request.base_url),
        status=status,
        title=title,
        instance=f"urn:ustun:request:{request_id(request)}",
        **extensions,
    )
    return Response(
        encode(body), status_code=body["status"], headers=headers, media_type=MEDIA_TYPE
    )


def problem_responses(*slugs: str) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route decorator: the business problems the route can answer with."""
    by_status: dict[int | str, dict[str, Any]] = {}
    for slug in slugs:
        entry = by_status.setdefault(
            CATALOGUE[slug].status, {"description": CATALOGUE[slug].title, "x-problems": []}
        )
        entry["x-problems"].append(slug)
    return by_status


def error_response(request: Request, exc: ProblemError) -> Response:
    """The problem+json answer of a `ProblemError`."""
    return problem_response(
        request, exc.slug, exc.detail, status=exc.status, headers=exc.headers, **exc.extensions
    )


async def _on_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProblemError)
    return error_response(request, exc)


async def _on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    # FastAPI answers 400 for a body it could not parse; say why (e.g. nested too deeply).
    cause = unreadable(exc.__cause__)
    if cause is not None:
        return await _on_problem(request, cause)
    slug = _SLUG_BY_STATUS.get(exc.status_code)
    detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
    if slug is None:
        phrase = HTTPStatus(exc.status_code).phrase
        slug = phrase.lower().replace(" ", "-")
        return problem_response(
            request, slug, detail, status=exc.status_code, title=phrase, headers=exc.headers
        )
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"Nothing at {request.url.path}."
    return problem_response(request, slug, detail, status=exc.status_code, headers=exc.headers)


def _field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [
        {
            "field": ".".join(str(part) for part in err.get("loc", ())),
            "message": field_message(err),
            "type": err.get("type", ""),
        }
        for err in exc.errors()
    ]


async def _on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    # FastAPI reports malformed JSON as a validation error at `body.<offset>`: it is a 400.
    cause = unreadable(exc.__cause__)
    if cause is not None:
        return await _on_problem(request, cause)
    errors = _field_errors(exc)
    fields = ", ".join(e["field"] for e in errors) or "the request"
    return problem_response(
        request, "validation-error", f"Invalid value in {fields}.", errors=errors
    )


async def _on_unhandled(request: Request, exc: Exception) -> Response:
    log.error(
        "unhandled error in %s %s [%s]",
        request.method,
        request.url.path,
        request_id(request),
        exc_info=exc,
        extra={"request_id": request_id(request)},
    )
    # This handler runs outside the request-id middleware, so it sets the header itself.
    return problem_response(
        request,
        "internal-error",
        f"Unexpected server error; quote request id {request_id(request)} when reporting it.",
        headers={"x-request-id": request_id(request)},
    )


def outage_response(request: Request, found: Outage) -> Response:
    """The problem answering a database outage, with the Retry-After of its kind."""
    slug, wait = OUTAGE_PROBLEMS[found.kind]
    extensions: dict[str, Any] = {"storage": "database"} if found.kind == "full" else {}
    return problem_response(
        request,
        slug,
        f"{found.detail} Retry after {format_retry_after(wait)} s.",
        headers={"retry-after": format_retry_after(wait)},
        **extensions,
    )


def install(app: FastAPI) -> None:
    """Route every error of `app` through the problem builder and add `/problems/{slug}`."""
    app.add_exception_handler(ProblemError, _on_problem)
    app.add_exception_handler(StarletteHTTPException, _on_http_exception)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(Exception, _on_unhandled)

    # The catalogue is fixed, so the index page is built once.
    index = _page("Problem types", *map(_section, CATALOGUE.values()))

    @app.get("/problems", response_class=HTMLResponse, include_in_schema=False)
    async def problem_index() -> HTMLResponse:
        return HTMLResponse(index)

    @app.get("/problems/{slug}", response_class=HTMLResponse, include_in_schema=False)
    async def problem_page(slug: str) -> HTMLResponse:
        entry = CATALOGUE.get(slug)
        if entry is None:
            raise ProblemError("not-found", f"No problem type named {slug!r}.")
        see_also = (
            f'<p><a href="/problems#{entry.slug}">Every problem type</a> (the same text as '
            f"<code>docs/problems.md#{entry.slug}</code> in ustun's repository).</p>"
        )
        return HTMLResponse(_page(entry.title, _section(entry), see_also))


def _section(entry: ProblemType) -> str:
    """One problem type as HTML, anchored by its slug."""
    return (
        f'<section id="{entry.slug}" class="card">'
        f"<h2>{entry.status} {html.escape(entry.title)}</h2>"
        f"<p>{html.escape(entry.description)}</p>"
        f"<p><code>type: …/problems/{entry.slug}</code></p></section>"
    )


def _page(title: str, *parts: str) -> str:
    """A page in the dashboard's look: its stylesheet and icon, served by this app (no other
    site's)."""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)} · ustun</title>"
        '<link rel=icon href="/favicon.ico">'
        '<link rel=stylesheet href="/dashboard/static/dashboard.css"></head>'
        f"<body><main><h1>{html.escape(title)}</h1>{''.join(parts)}</main></body></html>"
    )
