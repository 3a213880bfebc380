"""The ustun exception tree, at the bottom floor: every layer may raise these, and importing
it imports nothing else of ustun.

UstunError
├── ProblemError                   an RFC 9457 problem: raised by handlers, rendered as problem+json
│   ├── PreconditionRequiredError  428: a write that must be conditional came without If-Match
│   ├── PreconditionFailedError    412: If-Match / If-None-Match / If-Unmodified-Since was false
│   ├── InvalidPrecondition        400: If-Match is not `*` or a list of entity-tags
│   ├── NotFoundError              404: nothing at this URL for this account
│   ├── StateConflictError         409: the version matched but a business rule refused the change
│   │   └── IllegalTransition      409: a move the resource's transition table forbids
│   ├── InvalidIdempotencyKey      400: the Idempotency-Key header is malformed or repeated
│   └── InvalidLastEventId         400: Last-Event-ID is not an event id this server sent
├── GuardRejected                  compare-and-set: the version matched, the business guard did not
├── JobInterrupted                 a running job must stop now (raised by its context)
│   ├── JobCancelled               somebody asked to cancel it
│   └── LeaseLost                  a lease expired and another may hold it (a job's, a key's claim)
├── TransientError                 raised by a job to say "try me again later" (retried)
├── SignatureError                 a webhook failed Standard Webhooks verification
│   ├── MissingHeaders             a webhook-id, -timestamp or -signature header absent or malformed
│   ├── RepeatedHeaders            one of those headers sent more than once
│   ├── TimestampOutOfRange        webhook-timestamp further from now than the tolerance
│   └── InvalidSignature           no signature matches any of the secrets
├── RefusedAddress                 (also an OSError) webhooks may not connect to this address
├── BrokerRefused                  (ustun.webhooks.brokers) the broker nacked or has no such target
├── BrokerUnavailable              (ustun.webhooks.brokers) no usable connection to the broker
├── TokenError                     (ustun.webhooks.sending.oauth2) no OAuth2 token for an endpoint
├── FilterError                    (ustun.webhooks.filters, a ValueError) a refused payload filter
├── ClientError                    raised by `ustun.client`; carries the server's problem, if any
│   ├── ApiError                   the server answered with an error that no retry can fix
│   │   └── UpdateConflict         `update()` lost the race (412) on every attempt
│   ├── RetriesExhausted           transient failures until the attempts or the deadline ran out
│   └── WaitTimeout                `wait()`: the job had not finished when the timeout came
├── ConfigError                    a setting keeps ustun from starting (says which and the fix)
├── SchemaOutOfDate                the database schema is not the one this ustun expects
├── TablesMissing                  a table a library component needs is not in the app's database
├── SecretKeyError                 no usable master key for the secrets at rest
├── LoginRequired                  (ustun.service.dashboard) nobody is logged in: redirect
└── BodyTooLarge                   (service.plumbing.body_limit; a Starlette HTTPException) 413

The two broker errors belong to the broker transports, `TokenError` to the OAuth2 client,
`FilterError` to the payload filters, the last two to the service's plumbing; each is defined
there.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ustun.http.problem import Problem


__all__ = [
    "ApiError",
    "ClientError",
    "ConfigError",
    "GuardRejected",
    "IllegalTransition",
    "InvalidIdempotencyKey",
    "InvalidLastEventId",
    "InvalidPrecondition",
    "InvalidSignature",
    "JobCancelled",
    "JobInterrupted",
    "LeaseLost",
    "MissingHeaders",
    "NotFoundError",
    "PreconditionFailedError",
    "PreconditionRequiredError",
    "ProblemError",
    "RefusedAddress",
    "RepeatedHeaders",
    "RetriesExhausted",
    "SchemaOutOfDate",
    "SecretKeyError",
    "SignatureError",
    "StateConflictError",
    "TablesMissing",
    "TimestampOutOfRange",
    "TransientError",
    "UpdateConflict",
    "UstunError",
    "WaitTimeout",
]


class UstunError(Exception):
    """Base of every exception ustun raises on purpose."""


class ProblemError(UstunError):
    """A failure with a problem type: `slug` from the catalogue, a `detail` for the caller."""

    def __init__(
        self,
        slug: str,
        detail: str,
        *,
        status: int | None = None,
        headers: Mapping[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        super().__init__(detail)
        self.slug = slug
        self.detail = detail
        self.status = status
        self.headers = dict(headers or {})
        self.extensions = extensions


class PreconditionRequiredError(ProblemError):
    """428 (RFC 6585 §3): the route needs a precondition; `header` names the one to send."""

    def __init__(self, detail: str, *, header: str = "If-Match") -> None:
        super().__init__("precondition-required", detail, header=header)


class PreconditionFailedError(ProblemError):
    """412 (RFC 9110 §15.5.13): `header` evaluated false; re-read, re-apply, retry."""

    def __init__(self, detail: str, *, header: str) -> None:
        super().__init__("precondition-failed", detail, header=header)


class InvalidPrecondition(ProblemError):
    """400: an `If-Match` that is not `*` or a list of entity-tags (RFC 9110 §13.1.1): nothing
    can be matched against it, so the request is malformed (§15.5.1), not false (412)."""

    def __init__(self, detail: str, *, header: str = "If-Match") -> None:
        super().__init__("precondition-invalid", detail, header=header)


class NotFoundError(ProblemError):
    """404: nothing at this URL for this account."""

    def __init__(self, detail: str) -> None:
        super().__init__("not-found", detail)


class StateConflictError(ProblemError):
    """409: the change is refused by a business rule, not by a stale version."""

    def __init__(self, detail: str, **extensions: Any) -> None:
        super().__init__("state-conflict", detail, **extensions)


class IllegalTransition(StateConflictError):
    """A state change that the resource's transition table does not allow (409 state-conflict)."""

    def __init__(self, resource: str, current: str, target: str) -> None:
        super().__init__(
            f"The {resource} is {current}; it cannot become {target}.",
            current=current,
            target=target,
        )
        self.current = current
        self.target = target


class InvalidIdempotencyKey(ProblemError):
    """The `Idempotency-Key` header is malformed, empty, too long or sent more than once."""

    def __init__(self, detail: str) -> None:
        super().__init__("idempotency-key-invalid", detail)


class InvalidLastEventId(ProblemError):
    """`Last-Event-ID` is not an event id this server could have sent."""

    def __init__(self, detail: str) -> None:
        super().__init__("bad-request", detail, header="Last-Event-ID")


class GuardRejected(UstunError):
    """The version matched but the business `guard` did not; `current` is the row as it is.

    (A SQLAlchemy `Row`, typed `Any`: this layer imports nothing outside `ustun.http`.)
    """

    def __init__(self, current: Any) -> None:
        super().__init__("the compare-and-set guard refused the change")
        self.current = current


class JobInterrupted(UstunError):
    """A running job has to stop: raised from its context's `checkpoint()` / `progress()`."""


class JobCancelled(JobInterrupted):
    """The job's cancellation was requested; the job ends `cancelled`."""


class LeaseLost(JobInterrupted):
    """A lease ran out and another may hold it now, so the outcome must not be written.

    A worker's lease on a job, or a request's claim on an idempotency key (then its
    transaction must not commit).
    """


class TransientError(UstunError):
    """A job failed for a reason that may pass (a timeout, a busy dependency): retry it later."""


class SignatureError(UstunError):
    """A webhook could not be verified; never process its body."""


class MissingHeaders(SignatureError):
    """A Standard Webhooks header is absent or malformed."""


class RepeatedHeaders(SignatureError):
    """A Standard Webhooks header came more than once: which value was signed is ambiguous."""


class TimestampOutOfRange(SignatureError):
    """`webhook-timestamp` is older or newer than the tolerance allows (replay protection)."""


class InvalidSignature(SignatureError):
    """No `v1` signature in `webhook-signature` matches the body under the secret."""


class RefusedAddress(UstunError, OSError):
    """A connection to an address webhooks may not reach was about to be opened (EACCES).

    An OSError too: aiohttp reports a socket factory's OSError as a connection failure.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(errno.EACCES, f"refused: {reason}")


class ClientError(UstunError):
    """A call made with `ustun.client` failed; `problem` holds the server's problem details.

    `response` is the last `httpx.Response` (None after a network error, which is then also
    `__cause__`); `type`, `title`, `status` and `detail` read the problem details.
    """

    def __init__(
        self, message: str, *, problem: Problem | None = None, response: Any = None
    ) -> None:
        super().__init__(message)
        self.problem = problem
        self.response = response

    @property
    def type(self) -> str | None:
        """The problem `type` URI, e.g. `https://api.example/problems/precondition-failed`."""
        return self.problem.type if self.problem else None

    @property
    def title(self) -> str | None:
        """The problem's short, human-readable summary."""
        return self.problem.title if self.problem else None

    @property
    def status(self) -> int | None:
        """The HTTP status of the last response (from the problem, else the response)."""
        if self.problem is not None and self.problem.status is not None:
            return self.problem.status
        status = getattr(self.response, "status_code", None)
        return status if isinstance(status, int) else None

    @property
    def detail(self) -> str | None:
        """The problem's explanation of this occurrence."""
        return self.problem.detail if self.problem else None


class ApiError(ClientError):
    """The server answered with an error (4xx/5xx) that retrying cannot fix."""


class UpdateConflict(ApiError):
    """`update()` got 412 Precondition Failed on every attempt: others kept writing first."""


class RetriesExhausted(ClientError):
    """The retry policy gave up (attempts or deadline spent); `error`: the network error, if any."""

    def __init__(
        self,
        message: str,
        *,
        attempts: int,
        problem: Problem | None = None,
        response: Any = None,
        error: BaseException | None = None,
    ) -> None:
        super().__init__(message, problem=problem, response=response)
        self.attempts = attempts
        self.error = error


class WaitTimeout(ClientError):
    """`wait()` ran out of time; `job` is the last state of the job it saw (or None)."""

    def __init__(self, message: str, *, job: Any = None) -> None:
        super().__init__(message)
        self.job = job


class ConfigError(UstunError):
    """A setting that keeps ustun from starting; `str()` says which one and how to fix it."""


class SchemaOutOfDate(UstunError):
    """The database schema is older (or newer) than this version of ustun expects."""


class TablesMissing(UstunError):
    """A table a library component needs is not in the app's database (one line: what to run)."""


class SecretKeyError(UstunError):
    """No usable master key: missing on PostgreSQL, or a ciphertext that does not open."""
