"""Claiming due deliveries with a lease, so any number of workers share the work safely.

One statement for both backends: PostgreSQL locks the chosen rows with `FOR UPDATE SKIP
LOCKED` (concurrent workers take disjoint sets); SQLite runs it inside `BEGIN IMMEDIATE`, which
serialises writers. A claim moves `next_attempt_at` to the end of the lease and stamps a
`lease_token`: a worker that dies leaves rows that become due again when the lease ends, and a
late result from a lost lease is fenced off by the token.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Boolean, ColumnElement, func, literal_column, select, text, update

from ustun.store import Database
from ustun.webhooks.tables import DUE_PREDICATE, deliveries, endpoints

# How many due rows one claim looks at per row it may take (room for per-endpoint caps).
SCAN_FACTOR = 4
# One claim takes up to this many rounds of an endpoint's `max_in_flight`, so the claim's cost
# is spread over more sends; the lease must cover that many timeouts plus the one in flight.
CLAIM_ROUNDS = 2


@dataclass(frozen=True, slots=True)
class Claim:
    """A delivery this worker holds until `lease_until`."""

    id: str
    endpoint_id: str
    event_id: str
    attempt_count: int
    status: str


async def claim(
    db: Database,
    *,
    limit: int,
    now: datetime,
    lease_until: datetime,
    token: str,
    saturated: Collection[str] = (),
) -> list[Claim]:
    """Claim up to `limit` due deliveries, up to `CLAIM_ROUNDS` x `max_in_flight` per endpoint.

    `saturated` endpoints (already at their cap in this worker) are skipped, so their backlog
    never crowds out other endpoints' deliveries.
    """
    d = deliveries
    conditions: list[ColumnElement[bool]] = [
        literal_column(f"{d.name}.{DUE_PREDICATE}", Boolean()),
        d.c.next_attempt_at <= now,
    ]
    if saturated:
        conditions.append(d.c.endpoint_id.not_in(list(saturated)))
    # Rank candidates without locking them, then lock only the chosen rows (skipping any that
    # another worker holds): locking the whole scan would dirty every scanned row.
    due = (
        select(d.c.id, d.c.endpoint_id, d.c.next_attempt_at)
        .where(*conditions)
        .order_by(d.c.next_attempt_at)
        .limit(limit * SCAN_FACTOR)
        .subquery("due")
    )
    ranked = (
        select(
            due.c.id,
            due.c.next_attempt_at,
            func.row_number()
            .over(partition_by=due.c.endpoint_id, order_by=due.c.next_attempt_at)
            .label("rank"),
            endpoints.c.max_in_flight,
        )
        .join(endpoints, endpoints.c.id == due.c.endpoint_id)
        .subquery("ranked")
    )
    chosen = (
        select(ranked.c.id)
        .where(ranked.c.rank <= ranked.c.max_in_flight * CLAIM_ROUNDS)
        .order_by(ranked.c.next_attempt_at)
        .limit(limit)
    )
    locked = select(d.c.id).where(d.c.id.in_(chosen), *conditions).with_for_update(skip_locked=True)
    statement = (
        update(d)
        .where(d.c.id.in_(locked))
        .values(next_attempt_at=lease_until, lease_token=token)
        .returning(d.c.id, d.c.endpoint_id, d.c.event_id, d.c.attempt_count, d.c.status)
    )
    async with db.unit_of_work() as uow:
        if not db.is_sqlite:
            # A claim lost in a crash only leaves the row due again, so it need not wait for
            # the WAL flush; this takes an fsync off the commit -> send path.
            await uow.conn.execute(text("SET LOCAL synchronous_commit = off"))
        rows = (await uow.conn.execute(statement)).all()
    return [Claim(r.id, r.endpoint_id, r.event_id, r.attempt_count, r.status) for r in rows]
