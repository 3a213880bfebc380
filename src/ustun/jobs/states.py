"""The life cycle of a job as one transition table (in the spirit of h11's `_state.py`).

pending ──► processing ──► done | failed | cancelled
   │            │
   │            └──► pending       a retry after a transient error, or its lease expired
   └──► cancelled                  cancelled before any worker took it
"""

from __future__ import annotations

from typing import Final

from ustun.http.errors import IllegalTransition

PENDING: Final = "pending"
PROCESSING: Final = "processing"
DONE: Final = "done"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"

STATUSES: Final = (PENDING, PROCESSING, DONE, FAILED, CANCELLED)
FINAL: Final = frozenset({DONE, FAILED, CANCELLED})

TRANSITIONS: Final[dict[str, frozenset[str]]] = {
    PENDING: frozenset({PROCESSING, CANCELLED}),
    PROCESSING: frozenset({DONE, FAILED, CANCELLED, PENDING}),
    DONE: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}


def check(current: str, target: str) -> str:
    """Return `target` if a job may move from `current` to it; raise `IllegalTransition` if not."""
    if target not in TRANSITIONS.get(current, frozenset()):
        raise IllegalTransition("job", current, target)
    return target


def check_known(status: str) -> str:
    """Return `status` if it is one of the job statuses; raise ValueError otherwise."""
    if status not in TRANSITIONS:
        raise ValueError(f"unknown job status {status!r}")
    return status
