"""Idempotency records: their states, the response they keep, and the outcome of a claim.

A record's life cycle (one transition table; anything else is a bug):

    (absent) ──claim──▶ in_progress ──complete──▶ completed ──expire──▶ (absent)
                          │    ▲
                          │    └── take over (its lease expired: the holder died)
                          └── release ──▶ (absent)
"""

from __future__ import annotations

import enum
import json
import secrets
from dataclasses import dataclass
from datetime import datetime


class State(enum.StrEnum):
    """Where a record is in its life cycle."""

    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


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


@dataclass(frozen=True, slots=True)
class Claimed:
    """This request owns the key now; `lease_token` fences its completion."""

    lease_token: str


@dataclass(frozen=True, slots=True)
class Found:
    """Someone else holds or has completed the key."""

    record: Record


Claim = Claimed | Found


def new_lease_token() -> str:
    """A fencing token: unguessable and unique per claim."""
    return secrets.token_hex(16)
