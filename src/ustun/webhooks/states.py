"""The life cycle of a delivery as one transition table (in the style of h11's `_state.py`).

pending ──succeed──▶ succeeded          any state ──resend──▶ pending
   │ ▲                                  (manual retry, recover)
 fail│ └──────────┐
   ▼              │
failed ──fail──▶ failed ──give_up──▶ dead      (also pending ──give_up──▶ dead)
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Literal

from ustun.errors import IllegalTransition


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

# The status each change leads to (every edge of a change ends in the same status).
_TARGETS: dict[Change, Status] = {change: target for (_, change), target in TRANSITIONS.items()}

if TYPE_CHECKING:
    StatusValue = Status
else:
    # Every status as a `Literal` for the API's models: a plain string `enum` in JSON Schema.
    StatusValue = Literal[tuple(Status)]

# Statuses a dispatcher may claim once `next_attempt_at` has passed.
DUE = (Status.PENDING, Status.FAILED)


def sources(change: Change) -> tuple[Status, ...]:
    """Every status from which `change` is allowed (for bulk updates in SQL)."""
    return tuple(status for status, c in TRANSITIONS if c == change)


def transition(status: Status | str, change: Change) -> Status:
    """The status after `change`; raises `IllegalTransition` if the table has no such edge."""
    try:
        return TRANSITIONS[(Status(status), change)]
    except KeyError:
        raise IllegalTransition("delivery", str(status), _TARGETS[change]) from None
