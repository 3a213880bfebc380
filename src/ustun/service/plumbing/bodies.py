"""Request bodies: the JSON media type (else 415), unreadable JSON (400 `bad-request`), and a
number too long to read (422 `validation-error`).

FastAPI reads the body of most routes; `JsonBodies` and `unreadable` give its refusals the
same answers as `read_json`, which reads the routes FastAPI does not (hot routes; PATCH, by
media type).
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from typing import Annotated, Any, TypeVar

from fastapi import Request, params
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, BeforeValidator, ValidationError
from starlette.routing import BaseRoute
from starlette.types import Scope

from ustun.errors import ProblemError
from ustun.http.dates import RFC3339_EXAMPLE, parse_rfc3339
from ustun.route_table import Entry, entries

# Defined with the webhook endpoint's body, whose fields they are too; the service's other
# bodies take them from here.
from ustun.webhooks.endpoint_body import INTEGRAL_FLOAT as INTEGRAL_FLOAT
from ustun.webhooks.endpoint_body import EventPattern as EventPattern

M = TypeVar("M", bound=BaseModel)

JSON = "application/json"


def _rfc3339(value: object) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"expected an RFC 3339 date-time string, e.g. {RFC3339_EXAMPLE}")
    return parse_rfc3339(value)


# A moment a client sends (in a body or a query): an RFC 3339 date-time with its offset, as
# the schema's `date-time` says (pydantic alone would also take a date, a naive time or Unix
# seconds), whose moment in UTC is one a `datetime` holds. Parsed to UTC.
Moment = Annotated[datetime, BeforeValidator(_rfc3339)]


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


def _sent_content(request: Request) -> bool:
    """Whether the request has a media type to judge: a Content-Type, or content without one."""
    length = request.headers.get("content-length")
    return (
        "content-type" in request.headers
        or "transfer-encoding" in request.headers
        or (length is not None and length != "0")
    )


def _refuse_media_type(request: Request, expected: tuple[str, ...]) -> ProblemError:
    sent = _media_type(request) or "no Content-Type"
    headers = {"accept-patch": ", ".join(expected)} if request.method == "PATCH" else None
    return ProblemError(
        "unsupported-media-type",
        f"Send the body as {' or '.join(expected)}, not {sent}.",
        headers=headers,
        expected=list(expected),
    )


class JsonBodies:
    """The routes whose JSON body FastAPI reads: the plumbing refuses another media type with
    415 before they run (FastAPI itself would validate a text/plain body as bytes and call it
    an invalid value). A request with neither content nor Content-Type is left to validation:
    "Field required". Checked by the plumbing rather than as a dependency of every route, which
    FastAPI would solve on every request, a GET's too."""

    def __init__(self, router: Any) -> None:
        self._router = router
        self._source: list[Entry] | None = None
        self._table: list[tuple[re.Pattern[str], frozenset[str]]] = []
        self._methods: frozenset[str] = frozenset()

    def refusal(self, scope: Scope, path: str) -> ProblemError | None:
        """The 415 for a request to such a route with a body of another media type, else None."""
        routes = entries(self._router)
        if routes is not self._source:  # read again when routes were added
            self._source = routes
            self._table = [
                (entry.regex, frozenset(entry.methods or ()))
                for entry in routes
                if entry.regex is not None and _reads_json(entry.original)
            ]
            self._methods = frozenset().union(*(methods for _, methods in self._table))
        method = scope["method"]
        if method not in self._methods or not any(
            method in methods and regex.match(path) for regex, methods in self._table
        ):
            return None
        request = Request(scope)
        if not _sent_content(request) or _takes(_media_type(request), None):
            return None
        return _refuse_media_type(request, (JSON,))


def _reads_json(route: BaseRoute) -> bool:
    """Whether FastAPI reads `route`'s body as JSON (a body, and not a form)."""
    if not isinstance(route, APIRoute) or route.body_field is None:
        return False
    return not isinstance(route.body_field.field_info, params.Form)


def _takes(media_type: str, media_types: tuple[str, ...] | None) -> bool:
    """Whether a body of `media_type` is one of `media_types`; None: what FastAPI parses as
    JSON, `application/json` and any `application/*+json` (RFC 6839 §3.1)."""
    if media_types is not None:
        return media_type in media_types
    kind, _, subtype = media_type.partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


def _too_many_digits(cause: BaseException) -> bool:
    """Python's refusal to read an integer longer than `sys.get_int_max_str_digits()`: the one
    `ValueError` of `json.loads` that is not a `JSONDecodeError` (valid JSON, any length)."""
    return type(cause) is ValueError and "integer string conversion" in str(cause)


def unreadable(cause: BaseException | None) -> ProblemError | None:
    """The 400 `bad-request` for a body JSON could not decode, saying what and where, or the
    422 `validation-error` for a number too long to read; else None."""
    if isinstance(cause, json.JSONDecodeError):
        return ProblemError(
            "bad-request",
            f"The body is not valid JSON: {cause.msg} at line {cause.lineno}, "
            f"column {cause.colno} (character {cause.pos}).",
            line=cause.lineno,
            column=cause.colno,
            position=cause.pos,
        )
    if isinstance(cause, UnicodeDecodeError):
        return ProblemError(
            "bad-request",
            f"The body is not valid UTF-8: byte {cause.start} cannot start or continue a "
            "character.",
            position=cause.start,
        )
    if isinstance(cause, RecursionError):
        return ProblemError(
            "bad-request", "The JSON body is nested too deeply for this server to read."
        )
    if cause is not None and _too_many_digits(cause):
        message = f"a number has more than {sys.get_int_max_str_digits()} digits"
        return ProblemError(
            "validation-error",
            f"Invalid value in body: {message}.",
            errors=[{"field": "body", "message": message, "type": "number_too_long"}],
        )
    return None


async def read_json(
    request: Request, model: type[M], media_types: tuple[str, ...] | None = None
) -> M:
    """The body as `model`: 415 another media type, 400 unreadable JSON, 422 a bad shape.

    `media_types`: those it takes; None: JSON as FastAPI takes it (`application/json` or any
    `application/*+json`), so a hot route reading its body by hand answers as FastAPI's would.
    """
    if _sent_content(request) and not _takes(_media_type(request), media_types):
        raise _refuse_media_type(request, media_types or (JSON,))
    raw = await request.body()
    if not raw:
        raise RequestValidationError(
            [{"loc": ("body",), "msg": "Field required", "type": "missing"}]
        )
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        problem = unreadable(exc)
        if problem is None:
            raise
        raise problem from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [{**err, "loc": ("body", *err["loc"])} for err in exc.errors()]
        raise RequestValidationError(errors) from None
