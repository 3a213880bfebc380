"""ustun's errors as RFC 9457 problem details in a Starlette or FastAPI app.

    app = FastAPI()
    install_problem_handlers(app)

Every `UstunError` a route raises is answered `application/problem+json`: a `ProblemError`
(428 from `require_if_match`, 412 from `compare_and_set`, …) with its status, headers and
members; a webhook that fails verification as 401 `webhook-signature-invalid` (400
`webhook-header-repeated`), as `WebhookReceiver` answers it; `GuardRejected` as 409
`state-conflict`; any other as 500 `internal-error`, logged with its traceback.

One rule for `type` in every part of the library (these handlers, `IdempotencyMiddleware`,
`WebhookReceiver`): `<problem_base>/problems/<slug>`, so the relative `/problems/<slug>` by
default (RFC 9457 §3.1.1: resolved against the request's URL). The app then serves
`GET /problems` and `GET /problems/<slug>`, a short page per type, so that every `type` it
sends resolves; `pages=False` leaves those paths to the app.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ustun.errors import (
    GuardRejected,
    ProblemError,
    RepeatedHeaders,
    SignatureError,
    StateConflictError,
    UstunError,
)
from ustun.http.problem import CATALOGUE, MEDIA_TYPE, ProblemType, encode, problem

__all__ = ["install_problem_handlers", "problem_of", "problem_response"]

log = logging.getLogger("ustun.problems")


def problem_response(
    slug: str,
    detail: str,
    *,
    base: str = "",
    status: int | None = None,
    instance: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extensions: Any,
) -> Response:
    """A problem+json response of type `<base>/problems/<slug>`."""
    body = problem(slug, detail, base=base, status=status, instance=instance, **extensions)
    return Response(
        encode(body), status_code=body["status"], media_type=MEDIA_TYPE, headers=headers
    )


def problem_of(exc: UstunError) -> ProblemError:
    """The problem an error stands for; `internal-error` when it has none of its own."""
    if isinstance(exc, ProblemError):
        return exc
    if isinstance(exc, RepeatedHeaders):
        return ProblemError("webhook-header-repeated", str(exc))
    if isinstance(exc, SignatureError):
        return ProblemError("webhook-signature-invalid", str(exc))
    if isinstance(exc, GuardRejected):
        return StateConflictError("A business rule refuses this change in the resource's state.")
    return ProblemError("internal-error", "Unexpected server error; nothing was committed.")


def install_problem_handlers(app: Starlette, *, problem_base: str = "", pages: bool = True) -> None:
    """Answer every `UstunError` of `app` as problem+json; with `pages`, serve `/problems`."""

    async def on_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, UstunError)
        found = problem_of(exc)
        if found.slug == "internal-error" and found is not exc:
            log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        request_id = request.scope.get("state", {}).get("request_id")
        return problem_response(
            found.slug,
            found.detail,
            base=problem_base,
            status=found.status,
            instance=f"urn:ustun:request:{request_id}" if request_id else None,
            headers=found.headers,
            **found.extensions,
        )

    app.add_exception_handler(UstunError, on_error)
    if pages:
        app.add_route("/problems", _index, methods=["GET"], include_in_schema=False)
        app.add_route("/problems/{slug}", _page_of, methods=["GET"], include_in_schema=False)


async def _index(request: Request) -> Response:
    return HTMLResponse(_page("Problem types", *map(_section, CATALOGUE.values())))


async def _page_of(request: Request) -> Response:
    entry = CATALOGUE.get(request.path_params["slug"])
    if entry is None:
        return problem_response("not-found", f"No problem type at {request.url.path}.")
    return HTMLResponse(_page(entry.title, _section(entry)))


def _section(entry: ProblemType) -> str:
    return (
        f'<section id="{entry.slug}"><h2>{entry.status} {html.escape(entry.title)}</h2>'
        f"<p>{html.escape(entry.description)}</p></section>"
    )


def _page(title: str, *parts: str) -> str:
    return (
        f"<!doctype html><html lang=en><meta charset=utf-8><title>{html.escape(title)}</title>"
        f"<h1>{html.escape(title)}</h1>{''.join(parts)}</html>"
    )
