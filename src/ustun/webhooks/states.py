"""The life cycle of a delivery as one transition table (in the style of h11's `_state.py`).

pending ──succeed──▶ succeeded          any state ──resend──▶ pending
   │ ▲                                  (manual retry, recover)
 fail│ └──────────┐
   ▼              │
failed ──fail──▶ failed ──give_up──▶ dead      (also pending ──give_up──▶ dead)
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """Where a delivery is."""

    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"


class Change(StrEnum):
    """What happened to it."""

    SUCCEED = "succeed"
    FAIL = "fail"
    GIVE_UP = "give_up"
    RESEND = "resend"


class InvalidTransition(RuntimeError):
    """A change that the table does not allow from the current status."""


TRANSITIONS: dict[tuple[Status, Change], Status] = {
    (Status.PENDING, Change.SUCCEED): Status.SUCCEEDED,
    (Status.PENDING, Change.FAIL): Status.FAILED,
    (Status.PENDING, Change.GIVE_UP): Status.DEAD,
    (Status.PENDING, Change.RESEND): Status.PENDING,
    (Status.FAILED, Change.SUCCEED): Status.SUCCEEDED,
    (Status.FAILED, Change.FAIL): Status.FAILED,
    (Status.FAILED, Change.GIVE_UP): Status.DEAD,
    (Status.FAILED, Change.RESEND): Status.PENDING,
    (Status.DEAD, Change.RESEND): Status.PENDING,
    (Status.SUCCEEDED, Change.RESEND): Status.PENDING,
}

# Statuses a dispatcher may claim once `next_attempt_at` has passed.
DUE = (Status.PENDING, Status.FAILED)


def sources(change: Change) -> tuple[Status, ...]:
    """Every status from which `change` is allowed (for bulk updates in SQL)."""
    return tuple(status for status, c in TRANSITIONS if c == change)


def transition(status: Status | str, change: Change) -> Status:
    """The status after `change`; raises `InvalidTransition` if the table has no such edge."""
    try:
        return TRANSITIONS[(Status(status), change)]
    except KeyError:
        raise InvalidTransition(f"a {status} delivery cannot {change}") from None
