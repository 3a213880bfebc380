"""Precondition helpers for any async handler: require If-Match (428), evaluate reads (304/412).

They take the parsed `Preconditions` of a request (`Preconditions.from_headers(headers)`),
raise the problems of `ustun.errors`, and never touch a framework or a database.
"""

from __future__ import annotations

from ustun.errors import PreconditionFailedError, PreconditionRequiredError
from ustun.http.preconditions import (
    IF_MATCH,
    IF_NONE_MATCH,
    NotModified,
    PreconditionFailed,
    Preconditions,
    Validators,
    evaluate,
)

_WHAT_TO_DO = "GET the resource again, re-apply your change to it, and retry with its new ETag."


def require_if_match(pre: Preconditions, *, allow_create: bool = False) -> None:
    """Raise 428 unless the request has If-Match (or, with `allow_create`, If-None-Match: *)."""
    if pre.if_match is not None:
        return
    if allow_create and pre.if_none_match is not None and pre.if_none_match.any:
        return
    create = (
        " (or `If-None-Match: *` to create it only if it does not exist)" if allow_create else ""
    )
    raise PreconditionRequiredError(
        "This write must be conditional so it cannot overwrite a change you have not seen: "
        f"send `If-Match` with the ETag from your last read{create}.",
        header="If-Match",
    )


def failed(pre: Preconditions, field: str) -> PreconditionFailedError:
    """The 412 problem for `field` having evaluated false, saying what to do next."""
    if field == IF_NONE_MATCH and pre.if_none_match is not None and pre.if_none_match.any:
        return PreconditionFailedError(
            "If-None-Match: * requires that the resource does not exist, and it does. "
            "GET it to see it, or send If-Match with its ETag to replace it.",
            header="If-None-Match",
        )
    if field == IF_MATCH:
        why = (
            "If-Match does not match the current ETag: the resource changed since you read it, "
            "or does not exist (If-Match uses strong comparison, so a W/ tag never matches)."
        )
    elif field == IF_NONE_MATCH:
        why = "If-None-Match matches the current ETag."
    else:
        why = "The resource was modified after the date in If-Unmodified-Since."
    return PreconditionFailedError(f"{why} {_WHAT_TO_DO}", header=_display(field))


def conditional_read(method: str, pre: Preconditions, current: Validators) -> bool:
    """Evaluate a GET/HEAD: True means answer 304 Not Modified; a false If-Match raises 412."""
    outcome = evaluate(method, pre, current)
    if isinstance(outcome, PreconditionFailed):
        raise failed(pre, outcome.field)
    return isinstance(outcome, NotModified)


def _display(field: str) -> str:
    return "-".join(part.capitalize() for part in field.split("-"))
