"""The statements both dialects run alike, in SQLAlchemy Core: the base of both adapters.

Each adapter subclasses `SqlStore` and adds what it tunes for its dialect (emit's fan-out, the
claim, settling outcomes, NOTIFY). The claim's shape is shared too, as constants here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Row,
    Table,
    case,
    delete,
    func,
    insert,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import ids
from ustun.concurrency import GuardRejected, Preconditions, compare_and_delete, compare_and_set
from ustun.store import UnitOfWork, dialects
from ustun.store.plans import run
from ustun.webhooks.adapters import plans
from ustun.webhooks.records import EXPUNGED_DATA, Delivery, Endpoint, Event, Page, Sealed
from ustun.webhooks.states import DUE, Status
from ustun.webhooks.store import Attempt
from ustun.webhooks.tables import (
    attempts,
    deliveries,
    endpoints,
    events,
    inbox,
    reconcile_cursors,
)

# What re-enabling an endpoint starts it with: its circuit closed, no failures counted.
_FRESH = {"circuit_failures": 0, "circuit_open_until": None}


class SqlStore:
    """The dialect-neutral part of a `WebhookStore`; subclasses add `notify`, `claim` and
    `settle`."""

    # Whether `emit` NOTIFYs other processes' dispatchers (PostgreSQL).
    _notifies: bool

    async def emit(
        self,
        uow: UnitOfWork,
        event: Mapping[str, Any],
        endpoint_id: str | None,
        then: Callable[[list[str]], None],
    ) -> None:
        """The event row and its deliveries, through the plan any connection runs: a write
        nothing reads before the commit (`UnitOfWork.later`)."""
        await uow.later(plans.emit(event, endpoint_id, notify=self._notifies), then)

    async def endpoint_rows(
        self, conn: AsyncConnection, endpoint_ids: Collection[str]
    ) -> list[Endpoint]:
        """Those endpoints that still exist."""
        rows = await conn.execute(select(endpoints).where(endpoints.c.id.in_(endpoint_ids)))
        return [Endpoint._make(row) for row in rows]

    async def clear_failing(self, uow: UnitOfWork, endpoint_ids: Collection[str]) -> list[Endpoint]:
        """End the failing streak of those endpoints; the rows of those this ended."""
        e = endpoints
        found = await uow.conn.execute(
            update(e)
            .where(e.c.id.in_(endpoint_ids), e.c.failing_since.is_not(None))
            .values(failing_since=None)
            .returning(*e.c)
        )
        return [Endpoint._make(row) for row in found]

    async def held(self, uow: UnitOfWork, delivery_ids: Collection[str], token: str) -> set[str]:
        """Those deliveries this worker's lease `token` still holds, locked (PostgreSQL) until
        `uow` ends, so a `settle` with the token later in it applies to exactly these."""
        d = deliveries
        found = await uow.conn.scalars(
            select(d.c.id)
            .where(d.c.id.in_(delivery_ids), d.c.lease_token == token)
            .with_for_update()
        )
        return set(found.all())

    async def mark_failing(
        self, uow: UnitOfWork, endpoint_ids: Collection[str], now: datetime
    ) -> None:
        """Start a failing streak at `now` for those of the endpoints not already failing."""
        e = endpoints
        await uow.conn.execute(
            update(e)
            .where(e.c.id.in_(endpoint_ids), e.c.failing_since.is_(None))
            .values(failing_since=now)
        )

    async def failing_since(
        self, uow: UnitOfWork, endpoint_ids: Collection[str], before: datetime
    ) -> list[str]:
        """Those of the endpoints still enabled that have been failing since `before` or earlier."""
        e = endpoints
        expired = await uow.conn.scalars(
            select(e.c.id).where(
                e.c.id.in_(endpoint_ids), e.c.enabled.is_(True), e.c.failing_since <= before
            )
        )
        return list(expired.all())

    async def circuit_failed(
        self,
        uow: UnitOfWork,
        failures: Mapping[str, int],
        *,
        threshold: int,
        open_until: datetime,
        now: datetime,
    ) -> None:
        """One UPDATE of expressions over the stored values, so concurrent workers' batches add
        up: each endpoint's failures grow by its count; a circuit reaching `threshold`, or
        already open or half-open, opens until `open_until`."""
        e = endpoints
        added = case(failures, value=e.c.id, else_=0)
        opens = or_(e.c.circuit_failures + added >= threshold, e.c.circuit_open_until.is_not(None))
        await uow.conn.execute(
            update(e)
            .where(e.c.id.in_(list(failures)))
            .values(
                circuit_failures=e.c.circuit_failures + added,
                circuit_open_until=case((opens, open_until), else_=e.c.circuit_open_until),
                version=e.c.version + 1,
                updated_at=now,
            )
        )

    async def circuit_closed(
        self, uow: UnitOfWork, endpoint_ids: Collection[str], now: datetime
    ) -> None:
        """Close the circuits of those endpoints and reset their failures; only rows with
        either to clear are written."""
        e = endpoints
        await uow.conn.execute(
            update(e)
            .where(
                e.c.id.in_(list(endpoint_ids)),
                or_(e.c.circuit_failures != 0, e.c.circuit_open_until.is_not(None)),
            )
            .values(
                circuit_failures=0,
                circuit_open_until=None,
                version=e.c.version + 1,
                updated_at=now,
            )
        )

    async def endpoint(
        self, conn: AsyncConnection, account_id: str, endpoint_id: str
    ) -> Endpoint | None:
        """The account's endpoint by id, if it has one."""
        found = await conn.execute(select(endpoints).where(*_key(account_id, endpoint_id)))
        return _maybe(Endpoint._make, found.first())

    async def insert_endpoint(self, uow: UnitOfWork, values: Mapping[str, Any]) -> None:
        """Insert a new endpoint row."""
        await run(plans.insert_endpoint(values), uow.conn)

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
        """A PATCH as one compare-and-set; says whether this change enabled or disabled the
        endpoint (it was not already)."""
        c = endpoints.c
        key = _key(account_id, endpoint_id)
        if enabled is not None:
            # Re-enabling clears the failure streak and closes the circuit; enabling an enabled
            # endpoint keeps both.
            state = (
                {**_FRESH, "disabled_reason": None, "failing_since": None}
                if enabled
                else {"disabled_reason": reason}
            )
            change = {**values, "enabled": enabled, **state}
            try:
                row = await compare_and_set(
                    uow.conn,
                    endpoints,
                    where=key,
                    pre=pre,
                    values=change,
                    method="PATCH",
                    guard=c.enabled.is_(not enabled),
                )
            except GuardRejected:
                pass  # Already so: the rest of the change still applies, below.
            else:
                return Endpoint._make(row), True
        row = await compare_and_set(
            uow.conn, endpoints, where=key, pre=pre, values=values, method="PATCH"
        )
        return Endpoint._make(row), False

    async def delete_endpoint(
        self, uow: UnitOfWork, account_id: str, endpoint_id: str, pre: Preconditions
    ) -> None:
        """Delete the endpoint by compare-and-delete (its deliveries go by cascade) and its
        deliveries' attempts (no foreign key: see migration 0013)."""
        own = select(deliveries.c.id).where(
            deliveries.c.account_id == account_id, deliveries.c.endpoint_id == endpoint_id
        )
        await uow.conn.execute(delete(attempts).where(attempts.c.delivery_id.in_(own)))
        await compare_and_delete(uow.conn, endpoints, where=_key(account_id, endpoint_id), pre=pre)

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
        await uow.conn.execute(
            update(endpoints)
            .where(endpoints.c.id == endpoint_id)
            .values(
                secret=secret,
                public_key=public_key,
                previous_secret=previous,
                previous_secret_expires_at=previous_expires_at,
                version=endpoints.c.version + 1,
                updated_at=now,
            )
        )

    async def disable_endpoint(
        self, uow: UnitOfWork, endpoint_id: str, reason: str, now: datetime
    ) -> Endpoint | None:
        """Disable the endpoint if it is enabled; the new row, or None if it already was not."""
        found = await uow.conn.execute(
            update(endpoints)
            .where(endpoints.c.id == endpoint_id, endpoints.c.enabled.is_(True))
            .values(
                enabled=False,
                disabled_reason=reason,
                version=endpoints.c.version + 1,
                updated_at=now,
            )
            .returning(*endpoints.c)
        )
        return _maybe(Endpoint._make, found.first())

    async def lock_account(self, uow: UnitOfWork, account_id: str) -> None:
        """Serialise this account's quota checks until commit (the plan any connection runs)."""
        await run(plans.lock_account(account_id), uow.conn)

    async def endpoints_held(self, uow: UnitOfWork, account_id: str) -> int:
        """How many endpoints the account has, its quota checks serialised until commit."""
        return await run(plans.endpoints_held(account_id), uow.conn)

    async def count_events(
        self, uow: UnitOfWork, account_id: str, event_type: str, since: datetime
    ) -> tuple[int, datetime | None]:
        """How many `event_type` events the account logged after `since`, and the oldest's time."""
        count, oldest = (
            await uow.conn.execute(
                select(func.count(), func.min(events.c.created_at)).where(
                    events.c.account_id == account_id,
                    events.c.type == event_type,
                    events.c.created_at > since,
                )
            )
        ).one()
        return count, oldest

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
        txid: ColumnElement[int] = events.c.txid
        seq: ColumnElement[int] = events.c.seq
        where = [events.c.account_id == account_id]
        if since is not None:
            where.append(events.c.created_at >= since)
            if after == (0, 0):
                # A first page from `since` reads the events created since, by their index
                # (0017), and sorts them: `+ 0` keeps SQLite's planner from walking the whole
                # history in feed order to skip the older ones (PostgreSQL's avoids it anyway).
                txid, seq = txid + 0, seq + 0
        position = tuple_(txid, seq)
        where += [position > tuple_(*after), position <= tuple_(*upto)]
        if event_type is not None:
            where.append(events.c.type == event_type)
        query = select(events).where(*where).order_by(txid, seq).limit(limit)
        return [Event._make(row) for row in await conn.execute(query)]

    async def feed_position(
        self, conn: AsyncConnection, account_id: str, event_id: str
    ) -> tuple[int, int] | None:
        """The account's event's position in the feed, if the account has that event."""
        found = await conn.execute(
            select(events.c.txid, events.c.seq).where(
                events.c.id == event_id, events.c.account_id == account_id
            )
        )
        row = found.first()
        return None if row is None else (row.txid, row.seq)

    async def feed_last(
        self,
        conn: AsyncConnection,
        account_id: str,
        *,
        after: tuple[int, int],
        upto: tuple[int, int],
    ) -> tuple[str, int, int] | None:
        """The account's last event in `(after, upto]`, of any type and time: id and position."""
        position = tuple_(events.c.txid, events.c.seq)
        found = await conn.execute(
            select(events.c.id, events.c.txid, events.c.seq)
            .where(
                events.c.account_id == account_id,
                position > tuple_(*after),
                position <= tuple_(*upto),
            )
            .order_by(events.c.txid.desc(), events.c.seq.desc())
            .limit(1)
        )
        row = found.first()
        return None if row is None else (row.id, row.txid, row.seq)

    async def event(self, conn: AsyncConnection, event_id: str) -> Event:
        """One event (it exists)."""
        return Event._make(
            (await conn.execute(select(events).where(events.c.id == event_id))).one()
        )

    async def traceparents(self, conn: AsyncConnection, event_ids: Iterable[str]) -> dict[str, str]:
        """The stored trace context of each of the events that has one, by event id."""
        return await run(plans.traceparents(event_ids), conn)

    async def delivery(
        self, conn: AsyncConnection, account_id: str, delivery_id: str
    ) -> Delivery | None:
        """The account's delivery by id, if it has one."""
        d = deliveries
        found = await conn.execute(
            select(d).where(d.c.id == delivery_id, d.c.account_id == account_id)
        )
        return _maybe(Delivery._make, found.first())

    async def fifo_head(self, conn: AsyncConnection, endpoint_id: str) -> Delivery | None:
        """The endpoint's oldest undelivered delivery in its events' commit order, if any."""
        d = deliveries
        found = await conn.execute(
            select(d)
            .join(events, events.c.id == d.c.event_id)
            .where(d.c.endpoint_id == endpoint_id, d.c.next_attempt_at.is_not(None))
            .order_by(events.c.txid, events.c.seq)
            .limit(1)
        )
        return _maybe(Delivery._make, found.first())

    async def attempts(self, conn: AsyncConnection, delivery_id: str) -> list[Attempt]:
        """A delivery's attempts, oldest first."""
        tried = await conn.execute(
            select(attempts)
            .where(attempts.c.delivery_id == delivery_id)
            .order_by(attempts.c.attempted_at, attempts.c.id)
        )
        return [Attempt._make(row) for row in tried]

    async def retry(
        self, uow: UnitOfWork, delivery: Delivery, status: Status, now: datetime
    ) -> bool:
        """The delivery due now with `status`, through the plan any connection runs."""
        plan = plans.retry(delivery.id, delivery.endpoint_id, status, now, notify=False)
        return await run(plan, uow.conn)

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
        d = deliveries
        result = await uow.conn.execute(
            update(d)
            .where(
                d.c.endpoint_id == endpoint_id,
                d.c.status.in_([s.value for s in statuses]),
                d.c.created_at >= since,
                plans.PAYLOAD_KEPT,
            )
            .values(
                status=Status.PENDING.value, next_attempt_at=now, lease_token=None, updated_at=now
            )
        )
        return result.rowcount

    async def unexpunged_before(
        self, conn: AsyncConnection, before: datetime, limit: int
    ) -> list[str]:
        """Oldest first, by the partial index of the events still holding their payload."""
        found = await conn.execute(
            select(events.c.id)
            .where(events.c.expunged_at.is_(None), events.c.created_at < before)
            .order_by(events.c.created_at)
            .limit(limit)
        )
        return list(found.scalars())

    async def expunge(
        self, uow: UnitOfWork, event_ids: Collection[str], now: datetime, reason: str
    ) -> list[str]:
        """The events' UPDATE comes first: its row locks make a concurrent expunge of the same
        events wait, then find them expunged and do nothing more."""
        if not event_ids:
            return []
        conn = uow.conn
        expunged = list(
            (
                await conn.execute(
                    update(events)
                    .where(events.c.id.in_(list(event_ids)), events.c.expunged_at.is_(None))
                    .values(data=EXPUNGED_DATA, expunged_at=now)
                    .returning(events.c.id)
                )
            ).scalars()
        )
        if not expunged:
            return []
        d = deliveries
        of_events = select(d.c.id).where(d.c.event_id.in_(expunged))
        await conn.execute(
            update(attempts)
            .where(attempts.c.delivery_id.in_(of_events), attempts.c.response.is_not(None))
            .values(response=None)
        )
        given_up = list(
            (
                await conn.execute(
                    update(d)
                    .where(d.c.event_id.in_(expunged), d.c.next_attempt_at.is_not(None))
                    .values(
                        status=Status.DEAD.value,
                        next_attempt_at=None,
                        lease_token=None,
                        updated_at=now,
                    )
                    .returning(d.c.id)
                )
            ).scalars()
        )
        if given_up:
            await conn.execute(
                insert(attempts),
                [
                    Attempt(ids.new_id("att"), delivery_id, now, None, 0.0, reason, None)._asdict()
                    for delivery_id in given_up
                ],
            )
        return expunged

    async def claim_inbox(
        self, uow: UnitOfWork, webhook_id: str, event_type: str, *, now: datetime, stale: datetime
    ) -> bool:
        """Insert the id unless it is there; else take it over if unfinished and stale."""
        return await run(plans.claim_inbox(webhook_id, event_type, now=now, stale=stale), uow.conn)

    async def inbox_done(self, uow: UnitOfWork, webhook_id: str, now: datetime) -> None:
        """The id's handler finished at `now`."""
        await run(plans.inbox_done(webhook_id, now), uow.conn)

    async def inbox_failed(self, uow: UnitOfWork, webhook_id: str, error: str) -> None:
        """The id's handler gave up with `error` (its first 2,000 characters kept)."""
        await uow.conn.execute(
            update(inbox)
            .where(inbox.c.webhook_id == webhook_id)
            .values(last_error=error[:2000], handler_attempts=inbox.c.handler_attempts + 1)
        )

    async def inbox_handled(self, conn: AsyncConnection, webhook_id: str) -> bool:
        """One read by the primary key."""
        handled_at = await conn.scalar(
            select(inbox.c.handled_at).where(inbox.c.webhook_id == webhook_id)
        )
        return handled_at is not None

    async def reconcile_cursor(self, conn: AsyncConnection, source: str) -> str | None:
        """The saved cursor of the feed `source`, if any."""
        found: str | None = await conn.scalar(
            select(reconcile_cursors.c.cursor).where(reconcile_cursors.c.source == source)
        )
        return found

    async def save_reconcile_cursor(
        self, uow: UnitOfWork, source: str, cursor: str, now: datetime
    ) -> None:
        """Insert or replace the cursor of the feed `source`."""
        await uow.conn.execute(
            dialects.insert(uow.conn, reconcile_cursors)
            .values(source=source, cursor=cursor, updated_at=now)
            .on_conflict_do_update(
                index_elements=[reconcile_cursors.c.source],
                set_={"cursor": cursor, "updated_at": now},
            )
        )

    async def endpoints_page(
        self, conn: AsyncConnection, account_id: str, *, limit: int, cursor: str | None
    ) -> Page[Endpoint]:
        """The account's endpoints, newest first, after `cursor` (an id)."""
        where = [endpoints.c.account_id == account_id]
        return await _page(conn, endpoints, Endpoint._make, where, limit, cursor)

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
        where = [events.c.account_id == account_id]
        if event_type is not None:
            where.append(events.c.type == event_type)
        return await _page(conn, events, Event._make, where, limit, cursor)

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
        d = deliveries
        where = [d.c.account_id == account_id]
        if endpoint_id is not None:
            where.append(d.c.endpoint_id == endpoint_id)
        if event_id is not None:
            where.append(d.c.event_id == event_id)
        if status is not None:
            where.append(d.c.status == status.value)
        return await _page(conn, d, Delivery._make, where, limit, cursor)

    async def account_event(
        self, conn: AsyncConnection, account_id: str, event_id: str
    ) -> Event | None:
        """The account's event by id, if it has one."""
        found = await conn.execute(
            select(events).where(events.c.id == event_id, events.c.account_id == account_id)
        )
        return _maybe(Event._make, found.first())

    async def events_by_type(self, conn: AsyncConnection, account_id: str) -> dict[str, int]:
        """How many events the account has of each type."""
        return await _count_by(conn, events.c.type, events.c.account_id == account_id)

    async def deliveries_by_status(self, conn: AsyncConnection, account_id: str) -> dict[str, int]:
        """How many deliveries the account has in each status."""
        return await _count_by(conn, deliveries.c.status, deliveries.c.account_id == account_id)

    async def due_deliveries(
        self, conn: AsyncConnection, account_id: str | None, now: datetime
    ) -> tuple[int, datetime | None]:
        """How many deliveries are due by `now`, and the oldest's due time."""
        d = deliveries
        where = [d.c.status.in_([s.value for s in DUE]), d.c.next_attempt_at <= now]
        if account_id is not None:
            where.append(d.c.account_id == account_id)
        depth, oldest = (
            await conn.execute(select(func.count(), func.min(d.c.next_attempt_at)).where(*where))
        ).one()
        return depth, oldest

    async def sealed(self, conn: AsyncConnection, *, lock: bool) -> list[Sealed]:
        """Every endpoint's sealed values; with `lock`, locked until the transaction ends."""
        query = select(*(endpoints.c[name] for name in Sealed._fields))
        if lock:
            query = query.with_for_update()
        return [Sealed._make(row) for row in await conn.execute(query)]

    async def reseal(self, uow: UnitOfWork, sealed: Sealed) -> None:
        """Store the endpoint's values sealed anew."""
        _, *values = sealed._asdict().items()
        await uow.conn.execute(
            update(endpoints).where(endpoints.c.id == sealed.id).values(dict(values))
        )


R = TypeVar("R")


def _maybe(record: Callable[[Iterable[Any]], R], row: Row[Any] | None) -> R | None:
    return None if row is None else record(row)


async def _page(
    conn: AsyncConnection,
    table: Table,
    record: Callable[[Iterable[Any]], R],
    where: list[ColumnElement[bool]],
    limit: int,
    cursor: str | None,
) -> Page[R]:
    """Newest first by id (ids are time-ordered, so `id < cursor` pages stably while rows
    arrive); one row more than `limit` tells whether another page follows."""
    if cursor is not None:
        where = [*where, table.c.id < cursor]
    query = select(table).where(*where).order_by(table.c.id.desc()).limit(limit + 1)
    rows = (await conn.execute(query)).all()
    more = len(rows) > limit
    found = [record(row) for row in rows[:limit]]
    return Page(found, rows[limit - 1].id if more else None)


async def _count_by(
    conn: AsyncConnection, column: ColumnElement[str], where: ColumnElement[bool]
) -> dict[str, int]:
    query = select(column, func.count()).where(where).group_by(column).order_by(column)
    rows = await conn.execute(query)
    return {row[0]: row[1] for row in rows}


def _key(account_id: str, endpoint_id: str) -> list[Any]:
    return [endpoints.c.id == endpoint_id, endpoints.c.account_id == account_id]
