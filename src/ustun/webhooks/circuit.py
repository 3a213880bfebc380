"""An endpoint's circuit breaker: its states, as the API shows them, from the endpoint's row.

After `failures` consecutive failed attempts an endpoint's circuit opens: the claim takes none
of its deliveries (they wait, their attempts and retry times untouched) until `open_until`, its
probe time. Then it is half-open: the claim gives the endpoint one delivery at a time across
every worker, the probe. The probe's success closes the circuit (the backlog flows), its
failure opens it for another cool-down. Settling outcomes keeps the two columns
(`WebhookStore.circuit_failed`, `circuit_closed`); the claim reads them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ustun.clock import rfc3339
from ustun.webhooks.records import Endpoint

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"


def state(open_until: datetime | None, now: datetime) -> str:
    """`closed` without a probe time, `open` before it, `half_open` from it on."""
    if open_until is None:
        return CLOSED
    return OPEN if open_until > now else HALF_OPEN


def shown(row: Endpoint, now: datetime) -> dict[str, Any]:
    """The endpoint representation's `circuit`: its state, consecutive failed attempts, and
    while not closed when its probe may go (`probe_at`, RFC 3339)."""
    open_until = row.circuit_open_until
    return {
        "state": state(open_until, now),
        "failures": row.circuit_failures,
        "probe_at": None if open_until is None else rfc3339(open_until),
    }
