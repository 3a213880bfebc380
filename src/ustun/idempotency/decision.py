"""What to do with a request under an `Idempotency-Key`, decided without I/O.

Given the key, the request's fingerprint and what the store found (or claimed), these pure
functions say: run the handler, replay the stored answer, or refuse with a problem (400
missing/invalid key, 409 in progress with Retry-After, 422 key reused, 429 over quota); and,
once the handler answered, what becomes of its answer. The ASGI middleware uses them, as the
Django and WSGI middlewares will, so that every framework answers the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from ustun import instrumentation, tracing
from ustun.errors import InvalidIdempotencyKey
from ustun.http.fingerprint import matches
from ustun.http.idempotency_key import parse_idempotency_key
from ustun.http.retry_after import format_retry_after
from ustun.idempotency.records import Found, Lookup, OverQuota, Record, State, StoredResponse
from ustun.idempotency.sealing import forbids_storing

# How long a duplicate is told to wait at most before it retries a key still in progress.
IN_PROGRESS_RETRY_AFTER = 1.0
# The attributes `count` sets on the current span: the outcome, and whether it was a replay.
OUTCOME = "ustun.idempotency.outcome"
REPLAYED = "ustun.idempotency.replayed"
# Never stored, as at Stripe: the request was refused before it did anything (an unreadable
# body or one of another media type, validation, a failed or missing precondition, rate
# limiting), so a corrected retry may use the same key.
UNSTORED_STATUSES = frozenset({400, 412, 415, 422, 428, 429})
STILL_RUNNING = "A request with this Idempotency-Key is still being processed."


@dataclass(frozen=True, slots=True)
class Request:
    """A keyed request: the scope of its key, the key, and what its fingerprint is made of.

    `keys` are the fingerprint keys a stored fingerprint may have been made under (the
    current one first, then one rotated away).
    """

    scope: str
    key: str
    method: str
    path: str
    query: bytes
    body: bytes
    fingerprint: str
    keys: tuple[bytes, ...] = ()

    def same_as(self, stored: str) -> bool:
        """Whether a stored fingerprint is this request's. One made under a key this process
        no longer has cannot be told from another: taken to match, as a replay applies nothing
        twice."""
        if stored == self.fingerprint:
            return True
        same = matches(stored, self.method, self.path, self.query, self.body, keys=self.keys)
        return same is not False


@dataclass(frozen=True, slots=True)
class Run:
    """Run the handler."""


@dataclass(frozen=True, slots=True)
class Replay:
    """Send the stored answer again (with `Idempotent-Replayed: true`)."""

    response: StoredResponse


@dataclass(frozen=True, slots=True)
class Refuse:
    """Answer a problem (RFC 9457) of type `slug` and run nothing.

    `outcome` is what instrumentation counts (None: nothing); `extensions` join the problem.
    """

    slug: str
    detail: str
    outcome: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    extensions: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class Full:
    """The scope's stored answers are at their quota: ask the store when to come back
    (`over_quota`), then refuse with `over_quota(...)`."""


RUN = Run()
FULL = Full()
Decision = Run | Replay | Refuse | Full


def key_of(values: Sequence[str], *, required: bool, method: str, path: str) -> str | Refuse | None:
    """The key of the request's `Idempotency-Key` headers; None when it has none and may go
    without; the 400 refusal when it is malformed or missing where required."""
    try:
        key = parse_idempotency_key(values)
    except InvalidIdempotencyKey as exc:
        return Refuse(exc.slug, exc.detail)
    if key is not None:
        return key.value
    if required:
        return Refuse(
            "idempotency-key-missing", f"{method} {path} requires an Idempotency-Key header."
        )
    return None


def in_progress(wait: float, detail: str = STILL_RUNNING) -> Refuse:
    """409 `idempotency-in-progress`: retry after `wait` seconds."""
    headers = (("retry-after", format_retry_after(wait)),)
    return Refuse("idempotency-in-progress", detail, "in-progress", headers)


# Another transaction holds the key (PostgreSQL's advisory lock).
BUSY = in_progress(IN_PROGRESS_RETRY_AFTER)
# A claim's lease ran out and another request took the key over before this one committed.
LEASE_LOST = in_progress(
    IN_PROGRESS_RETRY_AFTER,
    "Another request took this Idempotency-Key over; nothing was applied by this one.",
)


def found(record: Record, request: Request, now: datetime) -> Replay | Refuse:
    """The answer to a request whose key another request holds or completed."""
    if not request.same_as(record.fingerprint):
        return Refuse(
            "idempotency-key-reused",
            "This Idempotency-Key was used for a different request (method, path or body).",
            "reused",
        )
    if record.state is State.IN_PROGRESS or record.response is None:
        wait = (record.locked_until - now) / timedelta(seconds=1)
        return in_progress(max(0.0, min(wait, IN_PROGRESS_RETRY_AFTER)))
    return Replay(record.response)


def not_claimed(claim: Found | OverQuota, request: Request, now: datetime) -> Replay | Refuse:
    """After a claim that is not ours: answer what holds the key, or refuse over the quota."""
    if isinstance(claim, Found):
        return found(claim.record, request, now)
    return over_quota(claim)


def on_lookup(lookup: Lookup, request: Request, now: datetime) -> Decision:
    """After reading the key before running: refuse while another transaction holds it,
    answer a record that answers it, refuse a new key of a full scope, else run."""
    if not lookup.held:
        return BUSY
    if lookup.record is not None and lookup.record.answers(now):
        return found(lookup.record, request, now)
    if lookup.full:
        return FULL
    return RUN


def over_quota(refusal: OverQuota) -> Refuse:
    """429 `quota-exceeded`: nothing ran; retry once enough stored answers have expired."""
    return Refuse(
        "quota-exceeded",
        f"The answers stored for this account's Idempotency-Keys hold {refusal.limit} bytes "
        "or more, its limit: a request with a new key runs once some of them have expired "
        "(keys already used still replay). Nothing was applied.",
        "over-quota",
        (("retry-after", format_retry_after(refusal.retry_after)),),
        (("limit", refusal.limit),),
    )


def unavailable(response: StoredResponse, *, sealer: bool, max_body: int) -> Refuse:
    """409 `idempotency-response-unavailable`: the key's request completed, but its body was
    not kept (over `max_body` bytes, or `no-store` where there is no `sealer`)."""
    why = (
        "was marked Cache-Control: no-store and this server has no key to keep it sealed"
        if not sealer and forbids_storing(response.headers)
        else f"exceeded the {max_body}-byte replay limit"
    )
    return Refuse(
        "idempotency-response-unavailable",
        f"The request with this Idempotency-Key completed with status {response.status}, "
        f"but its response {why} and was not kept.",
        "replayed",
        tuple((n, v) for n, v in response.headers if n.lower() == "location"),
        (("original_status", response.status),),
    )


class Keep(StrEnum):
    """What becomes of the handler's answer, and in transactional mode of its writes."""

    # Stored in the handler's transaction: the writes and the answer commit together.
    COMMIT = "commit"
    # Stored on its own (plain mode; in transactional mode a refusal whose writes roll back).
    STORE = "store"
    # Not stored, and the key freed for a retry (transactional mode: the writes roll back).
    RELEASE = "release"


def storable(status: int) -> bool:
    """Whether an answer of `status` may be stored (see `UNSTORED_STATUSES`)."""
    return status not in UNSTORED_STATUSES


def keep_plain(status: int, *, store_server_errors: bool) -> Keep:
    """Plain mode (the handler committed on its own): store the answer, or free the key."""
    if storable(status) and (status < 500 or store_server_errors):
        return Keep.STORE
    return Keep.RELEASE


def keep_transactional(status: int) -> Keep:
    """Transactional mode: a success commits with its answer; a storable 4xx rolls its writes
    back and is stored alone; anything else rolls back and frees the key."""
    if status < 400:
        return Keep.COMMIT
    if storable(status) and status < 500:
        return Keep.STORE
    return Keep.RELEASE


def count(outcome: str) -> None:
    """Report an outcome (executed, replayed, in-progress, reused, over-quota) to
    instrumentation hooks, the one name every idempotency front end counts under, and on the
    current span (`ustun.tracing`)."""
    instrumentation.emit("idempotency", outcome=outcome)
    if tracing.ENABLED:
        tracing.annotate({OUTCOME: outcome, REPLAYED: outcome == "replayed"})
