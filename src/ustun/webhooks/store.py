"""What the webhooks pillar needs from storage: the port its adapters implement, one per dialect.

The outbox, the dispatcher and the endpoint and delivery operations say what they need here;
`ustun.webhooks.adapters` holds the SQLite and PostgreSQL implementations, with each dialect's
tuned SQL side by side, and picks the one for a database. No other webhook module runs SQL,
imports a driver or asks which dialect it is on.

A claim moves `next_attempt_at` to the end of the lease and stamps a `lease_token`: a worker
that dies leaves rows that become due again when the lease ends, and a late outcome from a lost
lease is fenced off by the token (`settle` only touches rows still holding it, and clears it).
So an endpoint's deliveries in flight, across every worker, are its rows with a token whose
lease has not ended: the claim counts them under the endpoint's lock to enforce
`max_in_flight`, and spaces the sends of a rate-limited endpoint from its `next_send_at`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.http.preconditions import Preconditions
from ustun.store import Database, UnitOfWork
from ustun.store.listen import Listener
from ustun.webhooks.records import Delivery, Endpoint, Event, Page, Sealed
from ustun.webhooks.states import Status
from ustun.webhooks.tables import FIFO

# How far ahead a claim takes a rate-limited endpoint's send slots: its rows whose send time
# falls later wait for a later claim (so a worker never sits on slots it cannot use soon).
PACING_HORIZON = timedelta(seconds=1)


def cap(ordering: str, max_in_flight: int) -> int:
    """How many of an endpoint's deliveries may be in flight at once, across every worker: its
    `max_in_flight`, or 1 for a FIFO endpoint."""
    return 1 if ordering == FIFO else max_in_flight


class Claim(NamedTuple):
    """A delivery this worker holds until `lease_until`, with what sending it needs (a tuple,
    as a claim builds hundreds: a frozen dataclass took 1.1 µs each, this 0.2)."""

    id: str
    endpoint_id: str
    event_id: str
    attempt_count: int
    status: str
    event_type: str
    event_data: str
    event_created_at: datetime
    object_url: str | None
    endpoint_version: int
    endpoint_failing: bool
    # When to send it: now, or the endpoint's rate-limit slot for it (within `PACING_HORIZON`).
    send_at: datetime


class Settlement(NamedTuple):
    """A claimed delivery's new state after an outcome; `next_attempt_at` None once final."""

    id: str
    status: str
    attempt_count: int
    next_attempt_at: datetime | None


class Attempt(NamedTuple):
    """One recorded attempt of a delivery."""

    id: str
    delivery_id: str
    attempted_at: datetime
    status_code: int | None
    latency_ms: float
    error: str | None
    response: str | None


class ReceivingStore(Protocol):
    """What a receiver stores: its inbox of webhook ids and its reconcile cursors."""

    async def claim_inbox(
        self, uow: UnitOfWork, webhook_id: str, event_type: str, *, now: datetime, stale: datetime
    ) -> bool:
        """Record the id as received at `now`, or take it over if its handler has not finished
        and it was received before `stale`; whether this call holds it."""
        ...

    async def inbox_done(self, uow: UnitOfWork, webhook_id: str, now: datetime) -> None:
        """The id's handler finished at `now`."""
        ...

    async def inbox_failed(self, uow: UnitOfWork, webhook_id: str, error: str) -> None:
        """The id's handler gave up with `error`."""
        ...

    async def inbox_handled(self, conn: AsyncConnection, webhook_id: str) -> bool:
        """Whether the id's handler finished (not merely claimed)."""
        ...

    async def reconcile_cursor(self, conn: AsyncConnection, source: str) -> str | None:
        """The saved cursor of the feed `source`, if any."""
        ...

    async def save_reconcile_cursor(
        self, uow: UnitOfWork, source: str, cursor: str, now: datetime
    ) -> None:
        """Remember `cursor` for the feed `source`."""
        ...


class WebhookStore(ReceivingStore, Protocol):
    """Every read and write of the webhooks pillar, one instance per dialect.

    A method runs on what it takes: a `UnitOfWork`, in the caller's transaction (it commits
    with the caller's writes); a connection (`db.read()`'s, or a unit of work's to see its
    writes), for reads; the `Database`, when it runs in a transaction of its own (the claim) or
    opens a connection of its own (the listener). It returns the pillar's records
    (`webhooks.records`, and the tuples below), never a SQLAlchemy row.
    """

    # The outbox.

    async def emit(
        self,
        uow: UnitOfWork,
        event: Mapping[str, Any],
        endpoint_id: str | None,
        then: Callable[[list[str]], None],
    ) -> None:
        """Insert the event row (`adapters.plans.emit`) and a pending delivery of it to each
        endpoint that gets it: the account's enabled endpoints whose filter selects its type, or
        only `endpoint_id` when given (and enabled); wake other processes' dispatchers once
        `uow` commits. `then` takes the deliveries' ids once written (`UnitOfWork.later`: on
        SQLite with the transaction's next statement or its COMMIT)."""
        ...

    async def notify(self, uow: UnitOfWork) -> None:
        """Have dispatchers in other processes woken once `uow` commits (no-op where none can)."""
        ...

    def listener(self, db: Database, notified: Callable[[], None]) -> Listener | None:
        """What calls `notified` when another process's `notify` commits (None where none can)."""
        ...

    # The dispatcher.

    async def claim(
        self,
        db: Database,
        *,
        limit: int,
        now: datetime,
        lease_until: datetime,
        token: str,
        skip: Collection[str] = (),
        finished: Collection[str] = (),
        account_room: Mapping[str, int] = {},
        account_limit: int | None = None,
    ) -> list[Claim]:
        """Claim up to `limit` due deliveries, each endpoint's within its room across workers,
        in turns across accounts: every account's soonest due delivery, then every account's
        second, and so on; no more of one account's than its `account_room` (slots left), or
        `account_limit` for an account not in it (none without).

        An endpoint's room is `max_in_flight` (1 for a FIFO endpoint) less its deliveries in
        flight in any worker, and with a rate limit the slots before `now + PACING_HORIZON`;
        a FIFO endpoint offers only its head (its oldest undelivered event's delivery), and
        only once it is due. The cost grows with the batch and the number of endpoints, never
        with a backlog. `skip` names endpoints not to take; `finished` this worker's leased
        deliveries whose request is over but whose outcome is not recorded yet (no longer in
        flight at the receiver, so not counted against its room). Runs in a transaction of its own;
        each row is leased until `lease_until` plus its wait for `send_at`.
        """
        ...

    async def endpoint_rows(
        self, conn: AsyncConnection, endpoint_ids: Collection[str]
    ) -> list[Endpoint]:
        """The rows of those endpoints that still exist."""
        ...

    async def settle(
        self,
        uow: UnitOfWork,
        settled: Sequence[Settlement],
        attempts: Sequence[Attempt],
        *,
        now: datetime,
        token: str,
    ) -> None:
        """Apply outcomes to the deliveries still leased with `token`, and record the attempts
        of those that still exist (a deleted endpoint's are gone with it)."""
        ...

    async def clear_failing(self, uow: UnitOfWork, endpoint_ids: Collection[str]) -> list[Endpoint]:
        """End the failing streak of those endpoints; the rows of those this ended."""
        ...

    async def held(self, uow: UnitOfWork, delivery_ids: Collection[str], token: str) -> set[str]:
        """Those deliveries the lease `token` still holds, locked until `uow` ends."""
        ...

    async def mark_failing(
        self, uow: UnitOfWork, endpoint_ids: Collection[str], now: datetime
    ) -> None:
        """Start a failing streak at `now` for those of the endpoints not already failing."""
        ...

    async def failing_since(
        self, uow: UnitOfWork, endpoint_ids: Collection[str], before: datetime
    ) -> list[str]:
        """Those of the endpoints still enabled that have been failing since `before` or earlier."""
        ...

    async def circuit_failed(
        self,
        uow: UnitOfWork,
        failures: Mapping[str, int],
        *,
        threshold: int,
        open_until: datetime,
        now: datetime,
    ) -> None:
        """Add each endpoint's failed attempts to its circuit's count, in one statement whose
        expressions read the stored values (concurrent batches add up); open until
        `open_until` the circuits that reach `threshold` or are open or half-open already (a
        failed probe). A change of the endpoint's representation: its version moves."""
        ...

    async def circuit_closed(
        self, uow: UnitOfWork, endpoint_ids: Collection[str], now: datetime
    ) -> None:
        """Close those endpoints' circuits and reset their failures, writing only the rows with
        either to clear (their version moves)."""
        ...

    # Endpoints.

    async def endpoint(
        self, conn: AsyncConnection, account_id: str, endpoint_id: str
    ) -> Endpoint | None:
        """The account's endpoint by id, if it has one."""
        ...

    async def insert_endpoint(self, uow: UnitOfWork, values: Mapping[str, Any]) -> None:
        """Insert a new endpoint row."""
        ...

    async def change_endpoint(
        self,
        uow: UnitOfWork,
        account_id: str,
        endpoint_id: str,
        pre: Preconditions,
        values: Mapping[str, Any],
        *,
        enabled: bool | None,
        reason: str,
    ) -> tuple[Endpoint, bool]:
        """Apply `values` (and `enabled`) by compare-and-set; the new row, and whether this
        change is what disabled (for `reason`) or enabled it. Re-enabling clears the failing
        streak and closes the circuit."""
        ...

    async def delete_endpoint(
        self, uow: UnitOfWork, account_id: str, endpoint_id: str, pre: Preconditions
    ) -> None:
        """Delete the endpoint by compare-and-delete, with its deliveries and their attempts."""
        ...

    async def rotate_secret(
        self,
        uow: UnitOfWork,
        endpoint_id: str,
        *,
        secret: str,
        public_key: str | None,
        previous: str,
        previous_expires_at: datetime,
        now: datetime,
    ) -> None:
        """Store a new sealed key (and an ed25519 key's public half), keeping `previous`
        (sealed) until `previous_expires_at`."""
        ...

    # The event feed (`webhooks.feed`): positions are `(txid, seq)` pairs.

    async def feed_horizon(self, conn: AsyncConnection) -> tuple[int, int]:
        """The position at or below which every event has committed, or never will."""
        ...

    async def feed_events(
        self,
        conn: AsyncConnection,
        account_id: str,
        *,
        after: tuple[int, int],
        upto: tuple[int, int],
        limit: int,
        event_type: str | None,
        since: datetime | None,
    ) -> list[Event]:
        """The account's events in `(after, upto]`, in feed order, at most `limit`."""
        ...

    async def feed_position(
        self, conn: AsyncConnection, account_id: str, event_id: str
    ) -> tuple[int, int] | None:
        """The account's event's position in the feed, if the account has that event."""
        ...

    async def feed_last(
        self,
        conn: AsyncConnection,
        account_id: str,
        *,
        after: tuple[int, int],
        upto: tuple[int, int],
    ) -> tuple[str, int, int] | None:
        """The account's last event in `(after, upto]`, of any type and time: id and position."""
        ...

    async def disable_endpoint(
        self, uow: UnitOfWork, endpoint_id: str, reason: str, now: datetime
    ) -> Endpoint | None:
        """Disable the endpoint if it is enabled; the new row, or None if it already was not."""
        ...

    # Quotas.

    async def lock_account(self, uow: UnitOfWork, account_id: str) -> None:
        """Serialise this account's quota checks until `uow` commits."""
        ...

    async def endpoints_held(self, uow: UnitOfWork, account_id: str) -> int:
        """How many endpoints the account has, its quota checks serialised until commit."""
        ...

    async def count_events(
        self, uow: UnitOfWork, account_id: str, event_type: str, since: datetime
    ) -> tuple[int, datetime | None]:
        """How many `event_type` events the account logged after `since`, and the oldest's time."""
        ...

    # Events and deliveries.

    async def event(self, conn: AsyncConnection, event_id: str) -> Event:
        """One event row (it exists)."""
        ...

    async def traceparents(self, conn: AsyncConnection, event_ids: Iterable[str]) -> dict[str, str]:
        """The stored trace context of each of the events that has one, by event id."""
        ...

    async def delivery(
        self, conn: AsyncConnection, account_id: str, delivery_id: str
    ) -> Delivery | None:
        """The account's delivery by id, if it has one."""
        ...

    async def fifo_head(self, conn: AsyncConnection, endpoint_id: str) -> Delivery | None:
        """The endpoint's oldest undelivered delivery in its events' commit order, if any: what
        a FIFO endpoint sends next (or waits on, while it waits for a retry)."""
        ...

    async def attempts(self, conn: AsyncConnection, delivery_id: str) -> list[Attempt]:
        """A delivery's attempts, oldest first."""
        ...

    async def retry(
        self, uow: UnitOfWork, delivery: Delivery, status: Status, now: datetime
    ) -> bool:
        """Make the delivery due now with `status`, out of any worker's lease, if its endpoint is
        enabled; False (nothing changed) if it is not."""
        ...

    async def resend_endpoint(
        self,
        uow: UnitOfWork,
        endpoint_id: str,
        statuses: Collection[Status],
        since: datetime,
        now: datetime,
    ) -> int:
        """Make due now, as pending, the endpoint's deliveries in `statuses` created since
        `since`; how many."""
        ...

    # Retention (`webhooks.retention`).

    async def unexpunged_before(
        self, conn: AsyncConnection, before: datetime, limit: int
    ) -> list[str]:
        """Up to `limit` ids of the events created before `before` whose payload is still
        kept, oldest first."""
        ...

    async def expunge(
        self, uow: UnitOfWork, event_ids: Collection[str], now: datetime, reason: str
    ) -> list[str]:
        """Expunge the payloads of those events not expunged yet: `data` becomes
        `records.EXPUNGED_DATA` and `expunged_at` `now`, their attempts' response bodies go;
        ids, types, times, statuses and outcomes stay. Their deliveries still due (or in a
        worker's lease) give up, dead, each with an attempt recording `reason` (a lease's late
        outcome is fenced off). The ids this call expunged."""
        ...

    # Pages and counts, for the API and the dashboard.

    async def endpoints_page(
        self, conn: AsyncConnection, account_id: str, *, limit: int, cursor: str | None
    ) -> Page[Endpoint]:
        """The account's endpoints, newest first, after `cursor` (an id)."""
        ...

    async def events_page(
        self,
        conn: AsyncConnection,
        account_id: str,
        *,
        limit: int,
        cursor: str | None,
        event_type: str | None,
    ) -> Page[Event]:
        """The account's events, newest first, after `cursor`, of one type if given."""
        ...

    async def deliveries_page(
        self,
        conn: AsyncConnection,
        account_id: str,
        *,
        limit: int,
        cursor: str | None,
        endpoint_id: str | None,
        event_id: str | None,
        status: Status | None,
    ) -> Page[Delivery]:
        """The account's deliveries, newest first, after `cursor`, filtered by what is given."""
        ...

    async def account_event(
        self, conn: AsyncConnection, account_id: str, event_id: str
    ) -> Event | None:
        """The account's event by id, if it has one."""
        ...

    async def events_by_type(self, conn: AsyncConnection, account_id: str) -> dict[str, int]:
        """How many events the account has of each type."""
        ...

    async def deliveries_by_status(self, conn: AsyncConnection, account_id: str) -> dict[str, int]:
        """How many deliveries the account has in each status."""
        ...

    async def due_deliveries(
        self, conn: AsyncConnection, account_id: str | None, now: datetime
    ) -> tuple[int, datetime | None]:
        """How many deliveries (of the account, or of all) are due by `now`, and the oldest's
        due time."""
        ...

    # The secret key's rotation.

    async def sealed(self, conn: AsyncConnection, *, lock: bool) -> list[Sealed]:
        """Every endpoint's sealed values; with `lock`, locked until the transaction ends."""
        ...

    async def reseal(self, uow: UnitOfWork, sealed: Sealed) -> None:
        """Store the endpoint's values sealed anew."""
        ...
