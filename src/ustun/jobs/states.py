"""The life cycle of a job as one transition table (in the style of `webhooks/states.py`).

pending ──claim──▶ processing ──succeed──▶ done
   │                  │ ──fail──▶ failed
   │                  │ ──cancel──▶ cancelled
   │                  └──release──▶ pending    a retry after a transient error, its lease
   │                                            expired, or its worker stopping
   └──cancel──▶ cancelled                      cancelled before any worker took it
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


class Change(StrEnum):
    """What happened to it."""

    CLAIM = "claim"
    SUCCEED = "succeed"
    FAIL = "fail"
    CANCEL = "cancel"
    RELEASE = "release"


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

TRANSITIONS: Final[dict[tuple[JobStatus, Change], JobStatus]] = {
    (PENDING, Change.CLAIM): PROCESSING,
    (PENDING, Change.CANCEL): CANCELLED,
    (PROCESSING, Change.SUCCEED): DONE,
    (PROCESSING, Change.FAIL): FAILED,
    (PROCESSING, Change.CANCEL): CANCELLED,
    (PROCESSING, Change.RELEASE): PENDING,
}

# The status each change leads to (every edge of a change ends in the same status).
_TARGETS: Final = {change: target for (_, change), target in TRANSITIONS.items()}
# The change that leads to each status (an outcome's status names its change).
CHANGE_TO: Final = {target: change for change, target in _TARGETS.items()}

STATUSES: Final = tuple(JobStatus)
FINAL: Final = frozenset(STATUSES) - {status for status, _ in TRANSITIONS}


def transition(status: JobStatus | str, change: Change) -> JobStatus:
    """The status after `change`; raises `IllegalTransition` if the table has no such edge."""
    try:
        return TRANSITIONS[(JobStatus(status), change)]
    except (KeyError, ValueError):
        raise IllegalTransition("job", str(status), _TARGETS[change]) from None


def known(status: str) -> JobStatus:
    """`status` as a `JobStatus`; raise ValueError if it is not one of them."""
    try:
        return JobStatus(status)
    except ValueError:
        raise ValueError(f"unknown job status {status!r}") from None
