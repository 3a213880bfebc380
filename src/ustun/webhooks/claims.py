"""Claiming due deliveries with a lease, so any number of workers share the work safely.

One statement for both backends: PostgreSQL locks the chosen rows with `FOR UPDATE SKIP
LOCKED` (concurrent workers take disjoint sets); SQLite runs it inside `BEGIN IMMEDIATE`, which
serialises writers. A claim moves `next_attempt_at` to the end of the lease and stamps a
`lease_token`: a worker that dies leaves rows that become due again when the lease ends, and a
late result from a lost lease is fenced off by the token.

A claim also returns what sending needs besides the endpoint itself: the event's fields, and the
endpoint's version (so the dispatcher can keep decrypted endpoints until they change). PostgreSQL
does all of it in one statement on the asyncpg connection; SQLite reads them in the claim's
transaction.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Boolean, ColumnElement, func, literal_column, select, update

from ustun.store import Database
from ustun.webhooks.tables import DUE_PREDICATE, deliveries, endpoints, events

# How many due rows one claim looks at per row it may take (room for per-endpoint caps).
SCAN_FACTOR = 4
# One claim takes up to this many rounds of an endpoint's `max_in_flight`, so the claim's cost
# is spread over more sends; the lease must cover that many timeouts plus the one in flight.
CLAIM_ROUNDS = 2

# Settings for the claim's own short transaction on PostgreSQL, sent in one round trip:
# - a plan made for this execution: a cached generic plan is costed with the table's size when it
#   was made, so a dispatcher that started on an empty table went on scanning the whole table
#   for every claim once a burst arrived (70 ms per claim of 128 out of 10,000 due rows);
# - an asynchronous commit: a claim lost in a crash only leaves its rows due again.
CUSTOM_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan"
PLAN_AND_COMMIT = f"{CUSTOM_PLANS}; SET LOCAL synchronous_commit = off"

# The claim on PostgreSQL, joined to the event and endpoint in the same statement: $1 now,
# $2 saturated endpoint ids, $3 rows to scan, $4 limit, $5 lease end, $6 lease token. It ranks
# candidates without locking them, then locks only the chosen rows (skipping any that another
# worker holds): locking the whole scan would dirty every scanned row. Candidates are the rows
# soonest due, of which those due now: the same rows as scanning `next_attempt_at <= $1` up to
# the limit, but without the range's selectivity, which the planner can only guess (a third)
# before it has analysed the table, and then chose to sort the whole table. The chosen ids are
# locked, and the locked ones updated, through `= ANY(ARRAY(...))`, by primary key: with
# `IN (...)` the planner hash-joined them against a sequential scan of the whole table.
_CLAIMABLE = f"webhook_deliveries.{DUE_PREDICATE} AND endpoint_id <> ALL($2)"
_DUE = f"{_CLAIMABLE} AND next_attempt_at <= $1"
_PG_CLAIM = f"""
WITH due AS (
    SELECT id, endpoint_id, next_attempt_at FROM (
        SELECT id, endpoint_id, next_attempt_at FROM webhook_deliveries
        WHERE {_CLAIMABLE} ORDER BY next_attempt_at LIMIT $3
    ) soonest WHERE next_attempt_at <= $1
), ranked AS (
    SELECT due.id, due.next_attempt_at, w.max_in_flight,
        row_number() OVER (PARTITION BY due.endpoint_id ORDER BY due.next_attempt_at) AS rank
    FROM due JOIN webhook_endpoints w ON w.id = due.endpoint_id
), chosen AS (
    SELECT id FROM ranked WHERE rank <= max_in_flight * {CLAIM_ROUNDS}
    ORDER BY next_attempt_at LIMIT $4
), claimed AS (
    UPDATE webhook_deliveries SET next_attempt_at = $5, lease_token = $6
    WHERE id = ANY(ARRAY(
        SELECT id FROM webhook_deliveries WHERE id = ANY(ARRAY(SELECT id FROM chosen)) AND {_DUE}
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING id, endpoint_id, event_id, attempt_count, status
)
SELECT c.id, c.endpoint_id, c.event_id, c.attempt_count, c.status, e.type, e.data, e.created_at,
    e.object_url, w.version, w.failing_since IS NOT NULL
FROM claimed c
JOIN webhook_events e ON e.id = c.event_id
JOIN webhook_endpoints w ON w.id = c.endpoint_id
"""  # noqa: S608 - constants only; every value is a bound parameter


@dataclass(frozen=True, slots=True)
class Claim:
    """A delivery this worker holds until `lease_until`, with what sending it needs."""

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


# The columns of a `Claim`, in order, for the SQLite read.
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
    if db.is_sqlite:
        return await _claim_sqlite(db, limit, now, lease_until, token, saturated)
    async with db.autocommit() as conn, conn.transaction():
        await conn.execute(PLAN_AND_COMMIT)
        rows = await conn.fetch(
            _PG_CLAIM, now, list(saturated), limit * SCAN_FACTOR, limit, lease_until, token
        )
    return [Claim(*row) for row in rows]


async def _claim_sqlite(
    db: Database,
    limit: int,
    now: datetime,
    lease_until: datetime,
    token: str,
    saturated: Collection[str],
) -> list[Claim]:
    """The same claim in SQLAlchemy Core (serialised by `BEGIN IMMEDIATE`), then the details."""
    d = deliveries
    conditions: list[ColumnElement[bool]] = [
        literal_column(f"{d.name}.{DUE_PREDICATE}", Boolean()),
        d.c.next_attempt_at <= now,
    ]
    if saturated:
        conditions.append(d.c.endpoint_id.not_in(list(saturated)))
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
    statement = (
        update(d)
        .where(d.c.id.in_(chosen))
        .values(next_attempt_at=lease_until, lease_token=token)
        .returning(d.c.id)
    )
    async with db.unit_of_work() as uow:
        claimed = (await uow.conn.scalars(statement)).all()
        if not claimed:
            return []
        details = (
            select(*_COLUMNS)
            .join(events, events.c.id == d.c.event_id)
            .join(endpoints, endpoints.c.id == d.c.endpoint_id)
            .where(d.c.id.in_(claimed))
        )
        rows = (await uow.conn.execute(details)).all()
    return [Claim(*row) for row in rows]
