"""RFC 9457 problem details: the one builder and the catalogue of problem types ustun emits."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MEDIA_TYPE = "application/problem+json"


@dataclass(frozen=True, slots=True)
class ProblemType:
    """One entry of the catalogue: the slug in the `type` URI, its status, title and help text."""

    slug: str
    status: int
    title: str
    description: str


CATALOGUE: Mapping[str, ProblemType] = {
    p.slug: p
    for p in (
        ProblemType(
            "idempotency-key-missing",
            400,
            "Idempotency-Key required",
            "This route changes state and requires an Idempotency-Key header so that a retry "
            "can never apply the change twice. Send a unique value (a UUIDv4 is ideal) and "
            "reuse it, unchanged, on every retry of the same operation.",
        ),
        ProblemType(
            "idempotency-key-invalid",
            400,
            "Invalid Idempotency-Key",
            'The Idempotency-Key header must be a structured-field string ("...") or a bare '
            "token of 1 to 255 visible ASCII characters, sent once.",
        ),
        ProblemType(
            "idempotency-in-progress",
            409,
            "Request with this Idempotency-Key is in progress",
            "A request with the same Idempotency-Key is still being processed. Wait for the "
            "number of seconds in Retry-After and retry with the same key and body: you will "
            "get the stored result.",
        ),
        ProblemType(
            "idempotency-key-reused",
            422,
            "Idempotency-Key reused with a different request",
            "This Idempotency-Key was already used for a request with another method, path or "
            "body. Use a new key for a new operation.",
        ),
        ProblemType(
            "idempotency-response-unavailable",
            409,
            "Stored response not kept for replay",
            "The request with this Idempotency-Key was applied once, but its response was not "
            "kept: it was larger than the replay limit (a replay is never truncated), or it was "
            "marked Cache-Control: no-store and the server had no key to keep it encrypted. Read "
            "the resource it created or changed, for example at the Location header.",
        ),
        ProblemType(
            "precondition-required",
            428,
            "Precondition required",
            "This write must be conditional so that it cannot overwrite someone else's change. "
            "Read the resource, then send its ETag in If-Match.",
        ),
        ProblemType(
            "precondition-failed",
            412,
            "Precondition failed",
            "The resource changed since you read it (or does not exist in the state your "
            "precondition assumed). Re-read it, re-apply your change and send the new ETag.",
        ),
        ProblemType(
            "precondition-invalid",
            400,
            "Invalid precondition",
            "If-Match is not `*` or a comma-separated list of entity-tags in double quotes (such "
            'as `"3"`; RFC 9110 §13.1.1), or lists more than 100 of them, so nothing can be '
            "compared with it. Send the ETag exactly as the server sent it, quotes included.",
        ),
        ProblemType(
            "state-conflict",
            409,
            "State conflict",
            "The request conflicts with the current state of the resource under the business "
            "rules, for example cancelling a payment that already succeeded.",
        ),
        ProblemType(
            "insufficient-funds",
            409,
            "Insufficient funds",
            "The source account's balance is smaller than the amount of the transfer.",
        ),
        ProblemType(
            "balance-limit-exceeded",
            409,
            "Balance limit exceeded",
            "The transfer would raise the destination account's balance above "
            "9007199254740991 (2**53 - 1) minor units, the largest amount or balance ustun "
            "keeps. Nothing was moved.",
        ),
        ProblemType(
            "validation-error",
            422,
            "Validation error",
            "The request body or parameters do not match the schema. The `errors` member lists "
            "each offending field with what was expected. Amounts are integers from 1 and "
            "balances from 0, both at most 9007199254740991 (2**53 - 1); a number with a zero "
            "fraction such as 100.0 counts as an integer, 100.5 does not.",
        ),
        ProblemType(
            "bad-request",
            400,
            "Bad request",
            "The request is malformed: a body that is not valid JSON (the detail says what is "
            "wrong, at which line, column and character), not UTF-8 or nested too deeply, or a "
            "header whose value breaks its grammar (such as Last-Event-ID).",
        ),
        ProblemType(
            "not-found",
            404,
            "Not found",
            "No resource exists at this URL for your account.",
        ),
        ProblemType(
            "method-not-allowed",
            405,
            "Method not allowed",
            "The resource exists but does not support this method. The Allow header lists the "
            "methods it does support.",
        ),
        ProblemType(
            "unauthorized",
            401,
            "Unauthorized",
            "Send a valid API key as `Authorization: Bearer <key>`. `ustun keys create` makes one. "
            "A consumer portal link that expired or was revoked is refused the same way, its "
            "`detail` saying which: ask the service that sent it for a new one.",
        ),
        ProblemType(
            "event-cursor-invalid",
            400,
            "Invalid event cursor",
            "`after` on /v1/events takes the `next_cursor` of an earlier page of the event "
            "feed, unchanged, or `0` to start at the beginning. Cursors are opaque: do not "
            "build or edit one.",
        ),
        ProblemType(
            "event-expunged",
            409,
            "Event expunged",
            "The event's payload was expunged (past USTUN_WEBHOOK_PAYLOAD_RETENTION, or by "
            "POST /v1/events/{id}/expunge), so it cannot be sent again: its id, type, times and "
            "outcomes are all that is kept. Emit a new event if the receiver still needs it.",
        ),
        ProblemType(
            "webhook-signature-invalid",
            401,
            "Webhook signature invalid",
            "The webhook's Standard Webhooks headers are missing, its timestamp is outside the "
            "tolerance, or no signature matches the body under the receiver's secret.",
        ),
        ProblemType(
            "webhook-header-repeated",
            400,
            "Webhook header repeated",
            "A webhook-id, webhook-timestamp or webhook-signature header was sent more than "
            "once. A delivery carries each of them once; a repeated one would let a replayed "
            "message pass verification under one id and deduplication under another.",
        ),
        ProblemType(
            "payload-too-large",
            413,
            "Payload too large",
            "The request body is larger than this server accepts (USTUN_MAX_BODY, 1 MiB by "
            "default). The server stops reading at the limit and nothing of the request is "
            "applied.",
        ),
        ProblemType(
            "headers-too-large",
            431,
            "Request header fields too large",
            "The request line and headers are larger than this server accepts "
            "(USTUN_MAX_HEADER_BYTES, 64 KiB by default) or have more fields than it accepts "
            "(USTUN_MAX_HEADERS, 100 by default). The server stops reading there, answers this "
            "and closes the connection; nothing of the request is applied.",
        ),
        ProblemType(
            "quota-exceeded",
            429,
            "Quota exceeded",
            "The account already has as many of these resources as it may have (the `limit` "
            "member says how many). Delete one it no longer uses before adding another.",
        ),
        ProblemType(
            "rate-limited",
            429,
            "Too many requests",
            "Too many requests of this kind in a short time. Wait for the number of seconds in "
            "Retry-After, then try again.",
        ),
        ProblemType(
            "unsupported-media-type",
            415,
            "Unsupported media type",
            "The request body's Content-Type is not one this route accepts. Send JSON as "
            "`application/json`; a PATCH route lists the types it takes (such as "
            "`application/merge-patch+json`) in Accept-Patch.",
        ),
        ProblemType(
            "csrf-failed",
            403,
            "CSRF token missing or wrong",
            "A dashboard form was posted without the CSRF token of your session. Reload the "
            "page and submit the form again.",
        ),
        ProblemType(
            "forbidden",
            403,
            "Forbidden",
            "The credential is valid but may not do this. A consumer portal link manages its "
            "account's webhook endpoints, deliveries and events only; opening or revoking a "
            "portal session takes an operator key (`ustun keys create --operator`).",
        ),
        ProblemType(
            "job-failed",
            500,
            "Job failed",
            "The asynchronous job failed after its retries were used up (or with an error that "
            "retrying cannot fix). Nothing of it was kept; start a new job to try again.",
        ),
        ProblemType(
            "not-ready",
            503,
            "Not ready",
            "The service cannot reach its database or the schema is not migrated yet.",
        ),
        ProblemType(
            "database-unavailable",
            503,
            "Database unavailable",
            "The server could not reach its database, or the database closed the connection "
            "(it may be restarting). Wait for the number of seconds in Retry-After and retry "
            "with the same Idempotency-Key: a change that did commit is replayed, never applied "
            "twice.",
        ),
        ProblemType(
            "database-busy",
            503,
            "Database busy",
            "The database did not finish the request in time: a statement ran past "
            "USTUN_STATEMENT_TIMEOUT, it waited past USTUN_LOCK_TIMEOUT for rows another "
            "request was changing, or it lost a deadlock. Nothing was committed; wait for the "
            "number of seconds in Retry-After and retry with the same Idempotency-Key.",
        ),
        ProblemType(
            "insufficient-storage",
            507,
            "Insufficient storage",
            "The disk that holds the database is full (RFC 4918 §11.5), so this change was not "
            "stored; nothing of it was committed. The `storage` member names what is full. "
            "Reads and changes that need no more space still work; retry after Retry-After "
            "seconds, once the operator has made room.",
        ),
        ProblemType(
            "internal-error",
            500,
            "Internal server error",
            "Something failed on the server. Nothing was committed; it is safe to retry with "
            "the same Idempotency-Key. Quote the request id when reporting it.",
        ),
    )
}


def problem_type_uri(slug: str, base: str = "") -> str:
    """The `type` URI of a slug: `<base>/problems/<slug>` (relative when base is empty)."""
    return f"{base.rstrip('/')}/problems/{slug}"


def problem(
    slug: str,
    detail: str,
    *,
    base: str = "",
    status: int | None = None,
    title: str | None = None,
    instance: str | None = None,
    **extensions: Any,
) -> dict[str, Any]:
    """Build a problem details object; status and title default to the catalogue's."""
    known = CATALOGUE.get(slug)
    if known is not None:
        status = known.status if status is None else status
        title = known.title if title is None else title
    if status is None or title is None:
        raise ValueError(f"unknown problem slug {slug!r}: pass status and title explicitly")
    body: dict[str, Any] = {
        "type": problem_type_uri(slug, base),
        "title": title,
        "status": status,
        "detail": detail,
    }
    if instance is not None:
        body["instance"] = instance
    body.update(extensions)
    return body


def encode(body: Mapping[str, Any]) -> bytes:
    """Serialise a problem object as compact UTF-8 JSON."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True, slots=True)
class Problem:
    """A problem details object as a client reads it (RFC 9457 §3.1); unknown members kept."""

    type: str = "about:blank"
    title: str | None = None
    status: int | None = None
    detail: str | None = None
    instance: str | None = None
    extensions: Mapping[str, Any] | None = None

    @property
    def slug(self) -> str:
        """The last path segment of `type`: `idempotency-in-progress` for ustun's problems."""
        return self.type.rstrip("/").rsplit("/", 1)[-1]


_MEMBERS = ("type", "title", "status", "detail", "instance")


def parse_problem(content_type: str | None, body: bytes) -> Problem | None:
    """Read a problem+json body; None when the response is not one (RFC 9457 §3)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != MEDIA_TYPE:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None

    # RFC 9457 §3.1: a member of the wrong type is ignored, as if absent.
    def text(member: str) -> str | None:
        value = data.get(member)
        return value if isinstance(value, str) else None

    status = data.get("status")
    return Problem(
        type=text("type") or "about:blank",
        title=text("title"),
        status=status if isinstance(status, int) and not isinstance(status, bool) else None,
        detail=text("detail"),
        instance=text("instance"),
        extensions={k: v for k, v in data.items() if k not in _MEMBERS} or None,
    )
