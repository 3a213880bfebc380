"""Single-resource responses with validators, and the request's parsed preconditions.

Every single-resource response carries the current strong `ETag` (and `Last-Modified`), so a
client can always make its next request conditional.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import Response

from ustun.concurrency import conditional_read
from ustun.http.dates import format_http_date
from ustun.http.preconditions import Preconditions, Validators


def preconditions_of(request: Request) -> Preconditions:
    """If-Match, If-None-Match, If-Modified-Since and If-Unmodified-Since, parsed."""
    return Preconditions.from_headers(request.headers.items())


async def preconditions(request: Request) -> Preconditions:
    """`preconditions_of` as a dependency."""
    return preconditions_of(request)


Conditions = Annotated[Preconditions, Depends(preconditions)]


def validator_headers(current: Validators) -> dict[str, str]:
    """`ETag` and, when known, `Last-Modified` of the current representation."""
    headers = {"etag": str(current.etag)}
    if current.last_modified is not None:
        headers["last-modified"] = format_http_date(current.last_modified)
    return headers


def representation(
    body: Mapping[str, Any],
    current: Validators,
    *,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """A JSON representation of one resource with its validators."""
    return Response(
        json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(),
        status_code=status,
        media_type="application/json",
        headers={**validator_headers(current), **(headers or {})},
    )


def not_modified(current: Validators, headers: Mapping[str, str] | None = None) -> Response:
    """304 Not Modified: no body; the validators and `headers` the 200 would carry (RFC 9110
    §15.4.5)."""
    return Response(status_code=304, headers={**validator_headers(current), **(headers or {})})


def conditional_get(
    request: Request,
    pre: Preconditions,
    current: Validators,
    body: Mapping[str, Any],
    *,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """A GET/HEAD of one resource: 304 when the client's copy is current, else 200; both with
    the same validators and `headers`, so a cache updating from the 304 loses nothing."""
    if conditional_read(request.method, pre, current):
        return not_modified(current, headers)
    return representation(body, current, headers=headers)
