"""The retry policy's bookkeeping for one call, shared by `Client` and `AsyncClient`.

The clients differ only in how they send and sleep; everything else (the key, the decision,
the wait, the log line, the final error) lives here once.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

import httpx

from ustun.errors import RetriesExhausted
from ustun.http.backoff import RETRY_STATUSES, Backoff, decide
from ustun.http.problem import Problem, parse_problem
from ustun.http.retry_after import parse_retry_after

logger = logging.getLogger("ustun.client")

KEYED_METHODS = frozenset({"POST", "PATCH"})
"""Methods that get an `Idempotency-Key` of their own unless the caller set one."""

TRANSIENT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
"""Connection refused or reset, timeouts, and a connection dropped before the response."""


def new_idempotency_key() -> str:
    """A fresh key: a UUIDv4 as an RFC 8941 sf-string, as the idempotency-key draft asks."""
    return f'"{uuid.uuid4()}"'


def add_idempotency_key(request: httpx.Request) -> None:
    """Give a POST or PATCH its key, once: every retry re-sends this same request object."""
    if request.method in KEYED_METHODS and "idempotency-key" not in request.headers:
        request.headers["Idempotency-Key"] = new_idempotency_key()


def needs_body(response: httpx.Response) -> bool:
    """Whether the policy must read the body: its problem type decides, or goes in the error."""
    return response.status_code in RETRY_STATUSES


class Attempts:
    """One call's attempts: after each outcome, how long to wait, or that it is over."""

    def __init__(
        self,
        request: httpx.Request,
        backoff: Backoff | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.request = request
        self.backoff = backoff
        self.clock = clock
        self.started = clock()
        self.made = 0

    def after_response(self, response: httpx.Response) -> float | None:
        """Seconds to wait before sending again, or None: hand this response to the caller.

        Raises `RetriesExhausted` when the response is transient but no attempt is left.
        """
        self.made += 1
        if not needs_body(response):
            return None
        problem = parse_problem(response.headers.get("content-type"), response.content)
        reason = self._reason(status=response.status_code, problem=problem)
        if reason is None:
            return None
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        wait = self._wait(retry_after)
        if wait is None:
            raise RetriesExhausted(
                self._gave_up(reason), attempts=self.made, problem=problem, response=response
            )
        self._log(reason, wait)
        return wait

    def after_error(self, error: httpx.TransportError) -> float | None:
        """Seconds to wait before sending again, or None: re-raise the error as httpx would.

        Raises `RetriesExhausted` (from `error`) when it is transient but no attempt is left.
        """
        self.made += 1
        if not isinstance(error, TRANSIENT_ERRORS):
            return None
        reason = self._reason(error=f"{type(error).__name__}: {error}")
        if reason is None:
            return None
        wait = self._wait(None)
        if wait is None:
            raise RetriesExhausted(
                self._gave_up(reason), attempts=self.made, error=error
            ) from error
        self._log(reason, wait)
        return wait

    def _reason(
        self, *, status: int | None = None, problem: Problem | None = None, error: str | None = None
    ) -> str | None:
        if self.backoff is None:
            return None
        decision = decide(
            method=self.request.method,
            has_key="idempotency-key" in self.request.headers,
            replayable=isinstance(self.request.stream, httpx.ByteStream),
            status=status,
            problem_type=problem.type if problem else None,
            error=error,
        )
        if not decision.retry:
            logger.debug("not retrying %s %s: %s", *self._what(), decision.reason)
            return None
        return decision.reason

    def _wait(self, retry_after: float | None) -> float | None:
        assert self.backoff is not None
        return self.backoff.next_wait(
            attempts_made=self.made, elapsed=self.clock() - self.started, retry_after=retry_after
        )

    def _log(self, reason: str, wait: float) -> None:
        assert self.backoff is not None
        logger.debug(
            "retrying %s %s in %.2f s (attempt %d of %d): %s",
            *self._what(),
            wait,
            self.made + 1,
            self.backoff.attempts,
            reason,
        )

    def _gave_up(self, reason: str) -> str:
        method, url = self._what()
        return f"{method} {url} failed after {self.made} attempt(s): {reason}"

    def _what(self) -> tuple[str, str]:
        return self.request.method, str(self.request.url.copy_with(query=None))
