"""Single-resource responses with validators, and the request's parsed preconditions.

Every single-resource response carries the current strong `ETag` (and `Last-Modified`), so a
client can always make its next request conditional.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from ustun.http.dates import format_http_date
from ustun.http.errors import ProblemError
from ustun.http.preconditions import Preconditions, Validators

M = TypeVar("M", bound=BaseModel)


def preconditions(request: Request) -> Preconditions:
    """If-Match, If-None-Match, If-Modified-Since and If-Unmodified-Since, parsed."""
    return Preconditions.from_headers(request.headers.items())


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


def not_modified(current: Validators) -> Response:
    """304 Not Modified: no body, the validators only (RFC 9110 §15.4.5)."""
    return Response(status_code=304, headers=validator_headers(current))


async def read_json(request: Request, model: type[M], media_types: tuple[str, ...]) -> M:
    """The body as `model`: 415 for another media type, 422 for bad JSON or a bad shape."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type not in media_types:
        raise ProblemError(
            "unsupported-media-type",
            f"Send the body as {' or '.join(media_types)}, not {media_type or 'nothing'}.",
            headers={"accept-patch": ", ".join(media_types)},
        )
    try:
        data = json.loads(await request.body())
    except ValueError as exc:
        raise RequestValidationError(
            [{"loc": ("body",), "msg": f"Invalid JSON: {exc}", "type": "json_invalid"}]
        ) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [{**err, "loc": ("body", *err["loc"])} for err in exc.errors()]
        raise RequestValidationError(errors) from None
