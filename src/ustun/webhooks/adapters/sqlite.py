"""The webhooks store on SQLite: the claim and the settling of outcomes in SQLAlchemy Core.

SQLite has no row locks: the claim runs inside `BEGIN IMMEDIATE`, which serialises writers (so
each endpoint's room is counted by one claim at a time, as the endpoint locks do on PostgreSQL),
and reads what sending needs in the same transaction.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Boolean,
    Row,
    Select,
    bindparam,
    case,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.store import Database, UnitOfWork
from ustun.webhooks.adapters.common import SqlStore
from ustun.webhooks.store import PACING_HORIZON, Attempt, Claim, Settlement, cap
from ustun.webhooks.tables import (
    DUE_PREDICATE,
    FIFO,
    LEASED_PREDICATE,
    attempts,
    deliveries,
    endpoints,
    events,
)

# The columns of a `Claim`, in order, read after the claim.
_COLUMNS = (
    deliveries.c.id,
    deliveries.c.endpoint_id,
    deliveries.c.event_id,
    deliveries.c.attempt_count,
    deliveries.c.status,
    events.c.type,
    events.c.data,
    events.c.created_at,
    events.c.object_url,
    endpoints.c.version,
    endpoints.c.failing_since.is_not(None),
)
# Bind names of a `Settlement` (`id` and the others would clash with the columns' own).
_UPDATE_KEYS = ("b_id", "b_status", "b_attempts", "b_next")
_DUE = literal_column(f"{deliveries.name}.{DUE_PREDICATE}", Boolean())
_LEASED = literal_column(f"{deliveries.name}.{LEASED_PREDICATE}", Boolean())
# A chosen row's lease (`BEGIN IMMEDIATE` keeps it due between the pick and this update).
_LEASE = (
    update(deliveries)
    .where(deliveries.c.id == bindparam("b_id"))
    .values(next_attempt_at=bindparam("b_until"))
)
_NEXT_SLOT = (
    update(endpoints)
    .where(endpoints.c.id == bindparam("b_id"))
    .values(next_send_at=bindparam("b_next"))
)


def _ready(
    now: datetime,
    horizon: datetime,
    skip: Collection[str],
    finished: Collection[str],
    full_accounts: Collection[str],
) -> Select[Any]:
    """The endpoints with a due delivery and a send slot before `horizon`, their circuit not
    open, with how many deliveries each has in flight (leased, less those whose request is
    over) and, half-open, leased (its probe: the outcome not recorded yet counts)."""
    d, w = deliveries, endpoints
    held = (d.c.endpoint_id == w.c.id, _LEASED, d.c.next_attempt_at > now)
    leased = select(func.count()).where(*held, d.c.id.not_in(list(finished))).scalar_subquery()
    half_open = w.c.enabled & w.c.circuit_open_until.is_not(None)
    # Counted only for a half-open endpoint (CASE evaluates it lazily): the claim reads this
    # for every ready endpoint.
    probing = case((half_open, select(func.count()).where(*held).scalar_subquery()), else_=0)
    due = select(d.c.id).where(d.c.endpoint_id == w.c.id, _DUE, d.c.next_attempt_at <= now)
    return select(
        w.c.id,
        w.c.account_id,
        w.c.max_in_flight,
        w.c.rate_limit,
        w.c.ordering,
        w.c.next_send_at,
        half_open.label("half_open"),
        leased.label("leased"),
        probing.label("probing"),
    ).where(
        w.c.id.not_in(list(skip)),
        w.c.account_id.not_in(list(full_accounts)),
        or_(w.c.rate_limit.is_(None), w.c.next_send_at.is_(None), w.c.next_send_at <= horizon),
        or_(
            w.c.enabled.is_(False), w.c.circuit_open_until.is_(None), w.c.circuit_open_until <= now
        ),
        due.exists(),
    )


def _start(endpoint: Row[Any], now: datetime) -> datetime:
    """An endpoint's first free send slot from `now`."""
    return max(now, endpoint.next_send_at or now)


def _room(endpoint: Row[Any], now: datetime, horizon: datetime, limit: int) -> int:
    """How many deliveries a claim may give the endpoint: its cap less what is in flight (its
    circuit half-open: 1 less what is leased), and with a rate limit no more than the slots
    before `horizon`."""
    slots = limit
    if endpoint.rate_limit is not None:
        ahead = (horizon - _start(endpoint, now)).total_seconds()
        slots = math.floor(ahead * endpoint.rate_limit) + 1
    if endpoint.half_open:
        return min(1 - int(endpoint.probing), slots)
    return min(cap(endpoint.ordering, endpoint.max_in_flight) - int(endpoint.leased), slots)


def _candidates(endpoint: Row[Any], now: datetime, free: int) -> Select[Any]:
    """The endpoint's soonest `free` due deliveries; for a FIFO endpoint its head, if due."""
    d = deliveries
    if endpoint.ordering != FIFO:
        return (
            select(d.c.id, d.c.next_attempt_at)
            .where(d.c.endpoint_id == endpoint.id, _DUE, d.c.next_attempt_at <= now)
            .order_by(d.c.next_attempt_at)
            .limit(free)
        )
    head = (
        select(d.c.id, d.c.next_attempt_at)
        .join(events, events.c.id == d.c.event_id)
        .where(d.c.endpoint_id == endpoint.id, _DUE)
        .order_by(events.c.txid, events.c.seq)
        .limit(1)
        .subquery("head")
    )
    return select(head).where(head.c.next_attempt_at <= now)


def _turns(
    picked: list[tuple[datetime, str, str]],
    ready: dict[str, Row[Any]],
    account_room: Mapping[str, int],
    account_limit: int,
) -> list[tuple[datetime, str, str]]:
    """The picked rows in turns across accounts (each account's soonest, then each one's second,
    ...), no more of one account's than its room (`account_limit` if not given)."""
    taken: Counter[str] = Counter()
    turns = []
    for row in sorted(picked):
        account = ready[row[2]].account_id
        taken[account] += 1
        if taken[account] <= account_room.get(account, account_limit):
            turns.append((taken[account], row))
    return [row for _, row in sorted(turns)]


def _pace(
    chosen: list[tuple[datetime, str, str]], ready: dict[str, Row[Any]], now: datetime
) -> tuple[dict[str, datetime], dict[str, datetime]]:
    """Each chosen delivery's send time (now, or its endpoint's next slot, `1 / rate` apart) and
    each rate-limited endpoint's next free slot after them."""
    send_at: dict[str, datetime] = {}
    next_slot: dict[str, datetime] = {}
    for _, delivery_id, endpoint_id in chosen:
        endpoint = ready[endpoint_id]
        if endpoint.rate_limit is None:
            send_at[delivery_id] = now
        else:
            step = timedelta(seconds=1 / endpoint.rate_limit)
            at = next_slot.get(endpoint_id, _start(endpoint, now))
            send_at[delivery_id], next_slot[endpoint_id] = at, at + step
    return send_at, next_slot


class SqliteStore(SqlStore):
    """`WebhookStore` on SQLite (aiosqlite)."""

    _notifies = False

    async def notify(self, uow: UnitOfWork) -> None:
        """Nothing: SQLite has no other process to notify (the in-process doorbell does it)."""

    async def feed_horizon(self, conn: AsyncConnection) -> tuple[int, int]:
        """The newest committed event: writers take turns, so `seq` is commit-ordered."""
        largest = await conn.scalar(select(func.coalesce(func.max(events.c.seq), 0)))
        return 0, int(largest or 0)

    def listener(self, db: Database, notified: Callable[[], None]) -> None:
        """None: other processes are heard of by polling."""

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
        """The PostgreSQL claim's steps (see `adapters.postgres`), serialised by `BEGIN IMMEDIATE`
        instead of row locks, then the details, in one transaction."""
        horizon = now + PACING_HORIZON
        full = [account for account, room in account_room.items() if room <= 0]
        async with db.unit_of_work() as uow:
            ready = (await uow.conn.execute(_ready(now, horizon, skip, finished, full))).all()
            picked: list[tuple[datetime, str, str]] = []
            for endpoint in ready:
                free = _room(endpoint, now, horizon, limit)
                if free > 0:
                    found = await uow.conn.execute(_candidates(endpoint, now, free))
                    picked += [(row.next_attempt_at, row.id, endpoint.id) for row in found]
            if not picked:
                return []
            by_id = {e.id: e for e in ready}
            most = limit if account_limit is None else account_limit
            chosen = _turns(picked, by_id, account_room, most)
            send_at, next_slot = _pace(chosen[:limit], by_id, now)
            await uow.conn.execute(
                _LEASE.values(lease_token=token),
                [{"b_id": i, "b_until": lease_until + (at - now)} for i, at in send_at.items()],
            )
            if next_slot:
                await uow.conn.execute(
                    _NEXT_SLOT, [{"b_id": i, "b_next": at} for i, at in next_slot.items()]
                )
            details = (
                select(*_COLUMNS)
                .join(events, events.c.id == deliveries.c.event_id)
                .join(endpoints, endpoints.c.id == deliveries.c.endpoint_id)
                .where(deliveries.c.id.in_(list(send_at)))
            )
            rows = (await uow.conn.execute(details)).all()
        return [Claim(*row, send_at[row.id]) for row in rows]

    async def settle(
        self,
        uow: UnitOfWork,
        settled: Sequence[Settlement],
        attempts_made: Sequence[Attempt],
        *,
        now: datetime,
        token: str,
    ) -> None:
        """The fenced delivery updates and the attempt rows, through SQLAlchemy Core."""
        d = deliveries
        statement = (
            update(d)
            .where(d.c.id == bindparam("b_id"), d.c.lease_token == token)
            .values(
                status=bindparam("b_status"),
                attempt_count=bindparam("b_attempts"),
                next_attempt_at=bindparam("b_next"),
                lease_token=None,
                updated_at=now,
            )
        )
        await uow.conn.execute(
            statement, [dict(zip(_UPDATE_KEYS, r, strict=True)) for r in settled]
        )
        if not attempts_made:
            return
        # Attempts of the deliveries that still exist: an endpoint deleted meanwhile took its
        # deliveries along.
        wanted = {r.delivery_id for r in attempts_made}
        alive = set((await uow.conn.scalars(select(d.c.id).where(d.c.id.in_(wanted)))).all())
        rows = [r._asdict() for r in attempts_made if r.delivery_id in alive]
        if rows:
            await uow.conn.execute(insert(attempts), rows)
