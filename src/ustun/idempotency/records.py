"""Idempotency records: their states, the response they keep, and the outcome of a claim.

A record's life cycle as one transition table (the style of `webhooks.states`):

    absent ──claim──▶ in_progress ──complete──▶ completed ──expire──▶ absent
      │                 │    ▲
      │                 │    └── take_over (its lease ran out: the holder died)
      │                 └── release / expire ──▶ absent
      └──settle──▶ completed    (claimed and completed in one statement, in one transaction)
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from ustun.errors import IllegalTransition


class State(StrEnum):
    """Where a record is in its life cycle; `absent` is never stored (there is no row)."""

    ABSENT = "absent"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


class Change(StrEnum):
    """What happens to a record."""

    CLAIM = "claim"
    TAKE_OVER = "take_over"
    COMPLETE = "complete"
    SETTLE = "settle"
    RELEASE = "release"
    EXPIRE = "expire"


TRANSITIONS: dict[tuple[State, Change], State] = {
    (State.ABSENT, Change.CLAIM): State.IN_PROGRESS,
    (State.ABSENT, Change.SETTLE): State.COMPLETED,
    (State.IN_PROGRESS, Change.TAKE_OVER): State.IN_PROGRESS,
    (State.IN_PROGRESS, Change.COMPLETE): State.COMPLETED,
    (State.IN_PROGRESS, Change.RELEASE): State.ABSENT,
    (State.IN_PROGRESS, Change.EXPIRE): State.ABSENT,
    (State.COMPLETED, Change.EXPIRE): State.ABSENT,
}


# Each change leads to one state, wherever it is allowed from: what an illegal one tried to reach.
_TARGETS = {change: target for (_, change), target in TRANSITIONS.items()}


def transition(state: State, change: Change) -> State:
    """The state after `change`; raises `IllegalTransition` if the table has no such edge."""
    try:
        return TRANSITIONS[(state, change)]
    except KeyError:
        raise IllegalTransition("idempotency record", state, _TARGETS[change]) from None


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """What a replay sends back: status, allow-listed headers and the exact body bytes.

    `body` is None when the original body was over the size limit (or was `no-store` with no
    sealer) and was not kept; a `no-store` body is kept sealed (`sealing`).
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes | None

    def headers_json(self) -> str:
        """The headers as a JSON list of pairs, for storage."""
        return json.dumps([list(pair) for pair in self.headers], separators=(",", ":"))

    @staticmethod
    def headers_from_json(text: str) -> tuple[tuple[str, str], ...]:
        """Inverse of `headers_json`."""
        return tuple((str(name), str(value)) for name, value in json.loads(text))


@dataclass(frozen=True, slots=True)
class Record:
    """A stored idempotency record as another request with the same key finds it."""

    fingerprint: str
    state: State
    locked_until: datetime
    response: StoredResponse | None

    def answers(self, now: datetime) -> bool:
        """Whether it answers its key at `now`: completed, or claimed by a request whose lease
        runs (a claim whose lease ran out belongs to a dead request, and may be taken over)."""
        return self.state is State.COMPLETED or self.locked_until > now


@dataclass(frozen=True, slots=True)
class Lookup:
    """A key as a request finds it before it runs: its unexpired record (None: there is none),
    whether its scope's stored answers are at their quota, and whether the request holds the
    key until its transaction ends (False: another transaction holds it)."""

    record: Record | None
    full: bool
    held: bool = True


@dataclass(frozen=True, slots=True)
class Claimed:
    """This request owns the key now; `lease_token` fences its completion."""

    lease_token: str


@dataclass(frozen=True, slots=True)
class Found:
    """Someone else holds or has completed the key."""

    record: Record


@dataclass(frozen=True, slots=True)
class OverQuota:
    """The scope's stored answers hold `limit` bytes or more: a request with a new key is
    refused, and may come back in `retry_after` seconds, when some of them will have expired."""

    limit: int
    retry_after: float


Claim = Claimed | Found | OverQuota


def new_lease_token() -> str:
    """A fencing token: unguessable and unique per claim."""
    return secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class SealedAnswer:
    """A stored answer kept sealed (it was marked `no-store`): its key and its sealed body."""

    scope: str
    key: str
    body: bytes
