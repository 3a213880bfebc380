"""The ustun exception tree (pure: every layer may raise these; `ustun.errors` re-exports them).

UstunError
├── ProblemError    an RFC 9457 problem: raised by handlers, rendered as problem+json
│   └── IllegalTransition   a state change the resource's transition table forbids (409)
├── JobInterrupted  a running job must stop now (raised inside the job by its context)
│   ├── JobCancelled    somebody asked to cancel it
│   └── LeaseLost       its lease expired and another worker may hold it
└── TransientError  raised by a job to say "try me again later" (retried with backoff)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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


class IllegalTransition(ProblemError):
    """A state change that the resource's transition table does not allow (409 state-conflict)."""

    def __init__(self, resource: str, current: str, target: str) -> None:
        super().__init__(
            "state-conflict",
            f"The {resource} is {current}; it cannot become {target}.",
            current=current,
            target=target,
        )
        self.current = current
        self.target = target


class JobInterrupted(UstunError):
    """A running job has to stop: raised from its context's `checkpoint()` / `progress()`."""


class JobCancelled(JobInterrupted):
    """The job's cancellation was requested; the job ends `cancelled`."""


class LeaseLost(JobInterrupted):
    """The worker no longer holds the job's lease, so it must not write its outcome."""


class TransientError(UstunError):
    """A job failed for a reason that may pass (a timeout, a busy dependency): retry it later."""
