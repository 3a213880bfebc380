"""When to retry and how long to wait first (pure: no clock, no I/O).

`backoff(...)` is ustun's one backoff function: the client, webhook deliveries, the webhook
receiver's handler retries and jobs all wait what it says. For an HTTP request, two
questions, answered separately so that each can be tested on its own:

- `decide(...)`: may this request be sent again after this outcome, and why (or why not)?
  Only methods that are idempotent by definition (RFC 9110 §9.2.2) or requests that carry an
  `Idempotency-Key` (draft-ietf-httpapi-idempotency-key-header) are ever repeated, and only
  after an outcome that says "try again later".
- `Backoff.next_wait(...)`: `backoff` with full jitter, capped, bounded by a number of
  attempts and a total deadline; a server's `Retry-After` overrides it, capped.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from ustun.defaults import (
    DEFAULT_BACKOFF_ATTEMPTS,
    DEFAULT_BACKOFF_BASE,
    DEFAULT_BACKOFF_CAP,
    DEFAULT_BACKOFF_DEADLINE,
    DEFAULT_RETRY_AFTER_CAP,
)

Jitter = tuple[float, float]
"""The range of the random factor a backoff's ceiling is multiplied by."""
FULL_JITTER: Jitter = (0.0, 1.0)
"""Uniform in `[0, ceiling]` ("full jitter"): clients that failed together come back apart."""
TWENTY_PERCENT_JITTER: Jitter = (0.8, 1.2)
"""±20 %: the wait stays close to its schedule (webhook deliveries, job retries)."""
NO_JITTER: Jitter = (1.0, 1.0)
"""The ceiling itself: for retries in one process, where no crowd comes back at once."""

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
"""RFC 9110 §9.2.2: repeating these has the same effect as sending them once."""

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
"""Statuses that may be transient. 409 counts only as `idempotency-in-progress`."""

IN_PROGRESS_SUFFIX = "/idempotency-in-progress"
"""The problem type (RFC 9457) of a 409 that means "the first try is still running"."""

_MAX_EXPONENT = 64  # 2.0 ** 64 is far past any cap; stops float overflow on silly attempt counts


def _ceiling(retry: int, base: float, cap: float) -> float:
    return min(cap, base * 2.0 ** min(retry - 1, _MAX_EXPONENT))


def backoff(
    retry: int = 1,
    *,
    base: float,
    cap: float = math.inf,
    jitter: Jitter = FULL_JITTER,
    rand: Callable[[], float] = random.random,
) -> float:
    """The wait before the `retry`-th retry (1-based): `min(cap, base * 2 ** (retry - 1))` times
    a factor drawn uniformly from `jitter` (`rand` gives the draw in `[0, 1)`).

    `retry=1` is `base` itself, jittered: a fixed schedule's entry.
    """
    low, high = jitter
    return _ceiling(retry, base, cap) * (low + (high - low) * rand())


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether to send the request again, and the reason, for the log and the final error."""

    retry: bool
    reason: str


def decide(
    *,
    method: str,
    has_key: bool,
    replayable: bool,
    status: int | None = None,
    problem_type: str | None = None,
    error: str | None = None,
) -> Decision:
    """Classify one outcome: a response `status` (with its problem `type`) or a network `error`.

    `error` names a failure where no response arrived (connection refused or dropped, timeout).
    """
    if error is not None:
        why = f"network error: {error}"
    elif status is None:
        raise ValueError("an outcome is a response status or a network error")
    elif status not in RETRY_STATUSES:
        return Decision(False, f"{status} is final")
    elif status == 409 and not (problem_type or "").endswith(IN_PROGRESS_SUFFIX):
        return Decision(False, "409 is a conflict, not idempotency-in-progress")
    else:
        why = f"{status} idempotency-in-progress" if status == 409 else f"{status}"
    upper = method.upper()
    if upper not in IDEMPOTENT_METHODS and not has_key:
        return Decision(False, f"{why}; a {upper} without Idempotency-Key is never repeated")
    if not replayable:
        return Decision(False, f"{why}; the request body is a stream and cannot be replayed")
    return Decision(True, why)


@dataclass(frozen=True, slots=True)
class Backoff:
    """How often and how long to retry: full-jitter exponential backoff with hard limits.

    The n-th retry waits a uniformly random time in `[0, min(cap, base * 2 ** (n - 1))]`
    ("full jitter", so many clients that failed together do not come back together).
    """

    attempts: int = DEFAULT_BACKOFF_ATTEMPTS
    base: float = DEFAULT_BACKOFF_BASE
    cap: float = DEFAULT_BACKOFF_CAP
    deadline: float = DEFAULT_BACKOFF_DEADLINE
    retry_after_cap: float = DEFAULT_RETRY_AFTER_CAP

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts counts the first one too: it must be at least 1")
        if min(self.base, self.cap, self.deadline, self.retry_after_cap) < 0:
            raise ValueError("base, cap, deadline and retry_after_cap must not be negative")

    def ceiling(self, retry: int) -> float:
        """The longest backoff before the `retry`-th retry (1-based), before jitter."""
        return _ceiling(retry, self.base, self.cap)

    def delay(self, retry: int, *, rand: Callable[[], float] = random.random) -> float:
        """The jittered backoff before the `retry`-th retry: uniform in `[0, ceiling]`."""
        return backoff(retry, base=self.base, cap=self.cap, rand=rand)

    def next_wait(
        self,
        *,
        attempts_made: int,
        elapsed: float,
        retry_after: float | None = None,
        rand: Callable[[], float] = random.random,
    ) -> float | None:
        """Seconds to wait before the next attempt, or None when the attempts or time are spent.

        `retry_after` (already parsed, RFC 9110 §10.2.3) replaces the backoff, capped at
        `retry_after_cap`. A wait that would start the next attempt past the deadline is None:
        better to fail now than to sleep and fail.
        """
        if attempts_made >= self.attempts:
            return None
        if retry_after is None:
            wait = self.delay(attempts_made, rand=rand)
        else:
            wait = min(max(0.0, retry_after), self.retry_after_cap)
        if elapsed + wait > self.deadline:
            return None
        return wait
