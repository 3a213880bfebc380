"""The webhooks pillar's records: what its store returns, one field per column of its table.

Tuples rather than dataclasses, as the dispatcher and the pages build many of them; the adapters
make them from rows read by `select(table)`, whose columns come in the table's order (a test
holds the fields to the tables).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")

# An expunged event's `data` (JSON `null`: an event's data is always an object until then).
EXPUNGED_DATA = "null"


class Endpoint(NamedTuple):
    """A webhook endpoint; `secret`, `previous_secret`, `broker_url`, `mtls_key` and
    `oauth2_secret` are sealed."""

    id: str
    account_id: str
    kind: str
    url: str
    destination: str | None
    broker_url: str | None
    description: str
    events: str
    filter: str | None
    payload: str
    enabled: bool
    disabled_reason: str | None
    rate_limit: float | None
    max_in_flight: int
    ordering: str
    next_send_at: datetime | None
    signature: str
    public_key: str | None
    secret: str
    previous_secret: str | None
    previous_secret_expires_at: datetime | None
    mtls_certificate: str | None
    mtls_ca_bundle: str | None
    mtls_key: str | None
    oauth2: str | None
    oauth2_secret: str | None
    failing_since: datetime | None
    circuit_failures: int
    circuit_open_until: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime


class Event(NamedTuple):
    """An event of the log; `data` as stored (JSON text), `(txid, seq)` its feed position;
    `expunged_at` when its payload was expunged (`data` is then `EXPUNGED_DATA`); `traceparent`
    the trace its delivery attempts join (None with tracing off)."""

    id: str
    account_id: str
    type: str
    data: str
    object_url: str | None
    created_at: datetime
    txid: int
    seq: int
    expunged_at: datetime | None
    traceparent: str | None


class Delivery(NamedTuple):
    """One event's delivery to one endpoint; `next_attempt_at` None once final."""

    id: str
    account_id: str
    endpoint_id: str
    event_id: str
    status: str
    attempt_count: int
    next_attempt_at: datetime | None
    lease_token: str | None
    created_at: datetime
    updated_at: datetime


class Sealed(NamedTuple):
    """An endpoint's sealed values (each sealed with the endpoint's id as its context)."""

    id: str
    secret: str
    previous_secret: str | None
    broker_url: str | None
    mtls_key: str | None
    oauth2_secret: str | None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a list, newest first; `next_cursor` the last id on it when more follow."""

    items: list[T]
    next_cursor: str | None
