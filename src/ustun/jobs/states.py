"""The life cycle of a job as one transition table (in the style of `webhooks/states.py`).

pending ──► processing ──► done | failed | cancelled
   │            │
   │            └──► pending       a retry after a transient error, or its lease expired
   └──► cancelled                  cancelled before any worker took it
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Final, Literal

from ustun.errors import IllegalTransition


class JobStatus(StrEnum):
    """Where a job is."""

    PENDING = "pending"
    PROCESSING = "processing"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


if TYPE_CHECKING:
    JobStatusValue = JobStatus
else:
    # Every status as a `Literal` for the API's models: a plain string `enum` in JSON Schema.
    JobStatusValue = Literal[tuple(status.value for status in JobStatus)]

PENDING: Final = JobStatus.PENDING
PROCESSING: Final = JobStatus.PROCESSING
DONE: Final = JobStatus.DONE
FAILED: Final = JobStatus.FAILED
CANCELLED: Final = JobStatus.CANCELLED

TRANSITIONS: Final[dict[str, frozenset[JobStatus]]] = {
    PENDING: frozenset({PROCESSING, CANCELLED}),
    PROCESSING: frozenset({DONE, FAILED, CANCELLED, PENDING}),
    DONE: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}

STATUSES: Final = tuple(JobStatus)
FINAL: Final = frozenset(JobStatus(status) for status, exits in TRANSITIONS.items() if not exits)


def transition(current: str, target: str) -> JobStatus:
    """`target` if a job may move from `current` to it; raise `IllegalTransition` if not."""
    if target not in TRANSITIONS.get(current, frozenset()):
        raise IllegalTransition("job", current, target)
    return JobStatus(target)


def known(status: str) -> JobStatus:
    """`status` as a `JobStatus`; raise ValueError if it is not one of them."""
    try:
        return JobStatus(status)
    except ValueError:
        raise ValueError(f"unknown job status {status!r}") from None
