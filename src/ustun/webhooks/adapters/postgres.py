"""The webhooks store on PostgreSQL: the claim and the settling of outcomes straight on asyncpg.

The claim locks the chosen rows with `FOR UPDATE SKIP LOCKED` (concurrent workers take disjoint
sets) and returns, in the same statement, what sending needs besides the endpoint itself: the
event's fields and the endpoint's version (so the dispatcher can keep decrypted endpoints until
they change). Outcomes are settled in two statements over arrays, whatever the batch size.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.store import Database, UnitOfWork
from ustun.store.listen import Listener
from ustun.store.statements import Statement
from ustun.store.uow import asyncpg_connection
from ustun.webhooks.adapters.common import INSERT_EVENT, SCAN_FACTOR, SqlStore, emit_statement
from ustun.webhooks.store import CLAIM_ROUNDS, Attempt, Claim, Settlement
from ustun.webhooks.tables import DUE_PREDICATE
from ustun.webhooks.wakeup import CHANNEL

# Settings for the claim's own short transaction, sent in one round trip:
# - a plan made for this execution: a cached generic plan is costed with the table's size when it
#   was made, so a dispatcher that started on an empty table went on scanning the whole table
#   for every claim once a burst arrived (70 ms per claim of 128 out of 10,000 due rows);
# - an asynchronous commit: a claim lost in a crash only leaves its rows due again.
CUSTOM_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan"
PLAN_AND_COMMIT = f"{CUSTOM_PLANS}; SET LOCAL synchronous_commit = off"

# The claim, joined to the event and endpoint in the same statement: $1 now, $2 saturated
# endpoint ids, $3 rows to scan, $4 limit, $5 lease end, $6 lease token. It ranks
# candidates without locking them, then locks only the chosen rows (skipping any that another
# worker holds): locking the whole scan would dirty every scanned row. Candidates are the rows
# soonest due, of which those due now: the same rows as scanning `next_attempt_at <= $1` up to
# the limit, but without the range's selectivity, which the planner can only guess (a third)
# before it has analysed the table, and then chose to sort the whole table. The chosen ids are
# locked, and the locked ones updated, through `= ANY(ARRAY(...))`, by primary key: with
# `IN (...)` the planner hash-joined them against a sequential scan of the whole table.
_CLAIMABLE = f"webhook_deliveries.{DUE_PREDICATE} AND endpoint_id <> ALL($2)"
_DUE = f"{_CLAIMABLE} AND next_attempt_at <= $1"
_CLAIM = f"""
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

# A batch of outcomes in two statements: the fenced delivery updates, joined by primary key to
# the arrays of their new values, and the attempt rows in one INSERT. Both are planned for each
# batch (see `CUSTOM_PLANS`); the ids are matched through `= ANY(ARRAY(...))`, which the planner
# takes to the primary key, where a join on `d.id = u.id` alone, or `d.lease_token = $6`, led it
# to scan the whole table.
_SETTLE = """
UPDATE webhook_deliveries d
SET status = u.status, attempt_count = u.attempt_count, next_attempt_at = u.next_attempt_at,
    lease_token = NULL, updated_at = $5
FROM unnest($1::text[], $2::text[], $3::int[], $4::timestamptz[])
    AS u(id, status, attempt_count, next_attempt_at)
WHERE d.id = ANY(ARRAY(SELECT unnest($1::text[]))) AND d.id = u.id AND d.lease_token = $6
"""
_ATTEMPTS = """
INSERT INTO webhook_attempts
    (id, delivery_id, attempted_at, status_code, latency_ms, error, response)
SELECT * FROM unnest(
    $1::text[], $2::text[], $3::timestamptz[], $4::int[], $5::float8[], $6::text[], $7::text[]
)
"""

_NOTIFY = Statement(text("SELECT pg_notify(:channel, '')"))
# Every transaction older than the oldest one running on the server has finished.
_OLDEST_RUNNING = text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
_MAX_BIGINT = 2**63 - 1


class PostgresStore(SqlStore):
    """`WebhookStore` on PostgreSQL (asyncpg)."""

    _emit = emit_statement(
        INSERT_EVENT.format(
            agg="string_agg(ep.id, ' ')",
            patterns="SELECT FROM json_array_elements_text(ep.events::json) AS p(pattern)",
            p="p.pattern",
        ).replace(":endpoint_id", "CAST(:endpoint_id AS VARCHAR)")
    )

    async def notify(self, uow: UnitOfWork) -> None:
        """NOTIFY every listening dispatcher; PostgreSQL delivers it only if `uow` commits."""
        await _NOTIFY.count(uow.conn, {"channel": CHANNEL})

    def listener(self, db: Database, notified: Callable[[], None]) -> Listener:
        """A LISTEN on the webhooks channel, reconnecting after a lost connection."""
        return Listener(db.dsn, CHANNEL, notified)

    async def feed_horizon(self, conn: AsyncConnection) -> tuple[int, int]:
        """Just below the oldest transaction running: `txid` is the inserting transaction's."""
        oldest_running: int = await conn.scalar(_OLDEST_RUNNING)
        return oldest_running - 1, _MAX_BIGINT

    async def claim(
        self,
        db: Database,
        *,
        limit: int,
        now: datetime,
        lease_until: datetime,
        token: str,
        saturated: Collection[str] = (),
    ) -> list[Claim]:
        """The claim in one statement, in a short transaction of its own on the autocommit pool."""
        async with db.autocommit() as conn, conn.transaction():
            await conn.execute(PLAN_AND_COMMIT)
            rows = await conn.fetch(
                _CLAIM, now, list(saturated), limit * SCAN_FACTOR, limit, lease_until, token
            )
        return [Claim(*row) for row in rows]

    async def settle(
        self,
        uow: UnitOfWork,
        settled: Sequence[Settlement],
        attempts: Sequence[Attempt],
        *,
        now: datetime,
        token: str,
    ) -> None:
        """The fenced delivery updates and the attempt rows, straight on asyncpg."""
        conn = await asyncpg_connection(uow.conn)
        # One row per delivery (the last outcome wins, as it would updating them one by one).
        latest = {row.id: row for row in settled}
        await conn.execute(CUSTOM_PLANS)
        await conn.execute(_SETTLE, *map(list, zip(*latest.values(), strict=True)), now, token)
        if attempts:
            await conn.execute(_ATTEMPTS, *map(list, zip(*attempts, strict=True)))
