"""Problem details (RFC 9457) as Flask responses: ustun's slugs, statuses and titles."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flask.ctx import has_request_context
from flask.globals import request
from flask.wrappers import Response

from ustun.errors import ProblemError
from ustun.http.problem import MEDIA_TYPE, encode, problem


def problem_response(
    slug: str,
    detail: str,
    headers: Iterable[tuple[str, str]] = (),
    extensions: Iterable[tuple[str, Any]] = (),
    *,
    status: int | None = None,
) -> Response:
    """A problem+json response of type `/problems/<slug>`, `instance` the request's path."""
    instance = request.path if has_request_context() else None
    document = problem(slug, detail, status=status, instance=instance, **dict(extensions))
    response = Response(encode(document), status=document["status"], mimetype=MEDIA_TYPE)
    for name, value in headers:
        response.headers[name] = value
    return response


def response_of(error: ProblemError) -> Response:
    """The problem+json answer to a `ProblemError` a view raised (a 412, a quota refused)."""
    return problem_response(
        error.slug,
        error.detail,
        error.headers.items(),
        error.extensions.items(),
        status=error.status,
    )
