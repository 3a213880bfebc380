"""Problem details (RFC 9457) as Django responses: ustun's slugs, statuses and titles."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.http import HttpRequest, HttpResponse

from ustun.errors import ProblemError
from ustun.http.problem import MEDIA_TYPE, encode, problem


def problem_response(
    slug: str,
    detail: str,
    request: HttpRequest | None = None,
    headers: Iterable[tuple[str, str]] = (),
    extensions: Iterable[tuple[str, Any]] = (),
    *,
    status: int | None = None,
) -> HttpResponse:
    """A problem+json response of type `/problems/<slug>` (its catalogue status unless
    `status`), `instance` the request's path."""
    instance = None if request is None else request.path
    document = problem(slug, detail, status=status, instance=instance, **dict(extensions))
    response = HttpResponse(encode(document), status=document["status"], content_type=MEDIA_TYPE)
    for name, value in headers:
        response[name] = value
    return response


def response_of(error: ProblemError, request: HttpRequest | None = None) -> HttpResponse:
    """The problem+json response of a `ProblemError` (a quota refused, say)."""
    return problem_response(
        error.slug,
        error.detail,
        request,
        error.headers.items(),
        error.extensions.items(),
        status=error.status,
    )
