"""The webhooks store on PostgreSQL: the claim and the settling of outcomes straight on asyncpg.

The claim locks the endpoints it serves with `FOR NO KEY UPDATE SKIP LOCKED` (concurrent
workers take disjoint endpoints, so each endpoint's room is counted by one claim at a time) and
returns, with the rows it leased, what sending needs besides the endpoint itself: the event's
fields, the endpoint's version (so the dispatcher can keep decrypted endpoints until they
change) and each row's send time. Outcomes are settled in two statements over arrays,
whatever the batch size.
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
from ustun.webhooks.adapters.common import INSERT_EVENT, SqlStore, emit_statement
from ustun.webhooks.store import PACING_HORIZON, Attempt, Claim, Settlement
from ustun.webhooks.tables import DUE_PREDICATE, FIFO, LEASED_PREDICATE
from ustun.webhooks.wakeup import CHANNEL

# Settings for the claim's own short transaction, sent in one round trip:
# - a plan made for this execution: a cached generic plan is costed with the table's size when it
#   was made, so a dispatcher that started on an empty table went on scanning the whole table
#   for every claim once a burst arrived (70 ms per claim of 128 out of 10,000 due rows);
# - an asynchronous commit: a claim lost in a crash only leaves its rows due again;
# - no JIT: the FIFO branch's cost estimate (a whole endpoint's rows) crossed the JIT threshold,
#   and compiling took 30 ms of a claim that runs in one.
CUSTOM_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan"
PLAN_AND_COMMIT = f"{CUSTOM_PLANS}; SET LOCAL synchronous_commit = off; SET LOCAL jit = off"

# An endpoint's due rows, as a range of `ix_webhook_deliveries_endpoint_id_next_attempt_at` in
# row comparisons, read in the order only that index serves. With `endpoint_id = ...` the
# planner, which guesses an endpoint's share of the table from the average, walked the global
# due index instead, reading every endpoint's due rows to find one's.
_OWN_DUE = (
    "({q}.endpoint_id, {q}.next_attempt_at) > ({w}.id, '-infinity'::timestamptz)"
    " AND ({q}.endpoint_id, {q}.next_attempt_at) <= ({w}.id, $1)"
)

# The claim, in two statements of one short transaction. The first locks the endpoints that
# have a due delivery (`FOR NO KEY UPDATE ... SKIP LOCKED`: claims of one endpoint take turns
# across workers, while inserting its deliveries, whose foreign key takes `FOR KEY SHARE`, does
# not wait): one probe of its index range per endpoint (a LATERAL with LIMIT 1: an EXISTS may be
# turned into a join that reads every due row), whatever its backlog. A rate-limited endpoint
# whose next slot is beyond the horizon is left alone.
# $1 now, $2 endpoints to skip, $3 the horizon's end.
_READY = f"""
SELECT w.id FROM webhook_endpoints w
CROSS JOIN LATERAL (
    SELECT FROM webhook_deliveries d WHERE d.{DUE_PREDICATE} AND {_OWN_DUE.format(q="d", w="w")}
    ORDER BY d.endpoint_id, d.next_attempt_at LIMIT 1
) due
WHERE w.id <> ALL($2::text[])
    AND (w.rate_limit IS NULL OR w.next_send_at IS NULL OR w.next_send_at <= $3)
FOR NO KEY UPDATE OF w SKIP LOCKED
"""  # noqa: S608 - constants only; every value is a bound parameter
# The second, planned after the locks are held (so its snapshot sees every lease committed by
# the claim that held them before): each locked endpoint's room (its cap, 1 if FIFO, less its
# leased rows, from `ix_webhook_deliveries_leased`; with a rate limit, no more slots than fit
# before the horizon), then that many of its soonest due rows from its own index range (a FIFO
# endpoint: its head, the oldest undelivered event in `(txid, seq)` order below the xmin
# horizon, if due), the batch's soonest of those leased, each with its send time, and the rate
# limited endpoints' next slot moved past the last one taken. Joined to the event and endpoint
# in the same statement. Each endpoint's rows are read in its index's order (`_OWN_DUE`); a FIFO
# head is found through
# the endpoint's index and each undelivered row's event by primary key (`OFFSET 0` keeps the
# planner from hash-joining the whole event table), so it costs the FIFO endpoint's own
# backlog, nobody else's. Rows are updated through `= ANY(ARRAY(...))`, by primary key (with
# `IN (...)` the planner hash-joined them against a sequential scan of the whole table), and
# only while still due (a late settle may have finished one since it was picked).
# $1 now, $2 locked endpoints, $3 limit, $4 lease end, $5 lease token, $6 the horizon's end,
# $7 leased rows whose request is over (their outcome not recorded yet: not in flight).
_CLAIM = f"""
WITH room AS (
    SELECT w.id, w.rate_limit, w.ordering = '{FIFO}' AS fifo,
        greatest(w.next_send_at, $1::timestamptz) AS start,
        least(
            CASE WHEN w.ordering = '{FIFO}' THEN 1 ELSE w.max_in_flight END - (
                SELECT count(*) FROM webhook_deliveries l WHERE l.endpoint_id = w.id
                    AND l.{LEASED_PREDICATE} AND l.next_attempt_at > $1
                    AND l.id <> ALL($7::text[])),
            CASE WHEN w.rate_limit IS NULL THEN $3
                ELSE 1 + floor(w.rate_limit
                    * extract(epoch FROM $6::timestamptz - greatest(w.next_send_at, $1)))::int
            END
        ) AS free
    FROM webhook_endpoints w WHERE w.id = ANY($2::text[])
), picked AS (
    SELECT d.id, r.id AS endpoint_id, d.next_attempt_at,
        CASE WHEN r.rate_limit IS NULL THEN $1 ELSE r.start + make_interval(secs =>
            (row_number() OVER (PARTITION BY r.id ORDER BY d.next_attempt_at, d.id) - 1)
            / r.rate_limit)
        END AS send_at
    FROM room r CROSS JOIN LATERAL (
        SELECT q.id, q.next_attempt_at FROM webhook_deliveries q
        WHERE NOT r.fifo AND q.{DUE_PREDICATE} AND {_OWN_DUE.format(q="q", w="r")}
        ORDER BY q.endpoint_id, q.next_attempt_at LIMIT greatest(r.free, 0)
    ) d
    UNION ALL
    SELECT h.id, r.id, h.next_attempt_at, r.start
    FROM room r CROSS JOIN LATERAL (
        SELECT q.id, q.next_attempt_at
        FROM webhook_deliveries q, LATERAL (
            SELECT txid, seq FROM webhook_events e WHERE e.id = q.event_id OFFSET 0
        ) e
        WHERE r.fifo AND r.free > 0 AND q.endpoint_id = r.id AND q.{DUE_PREDICATE}
            AND e.txid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint
        ORDER BY e.txid, e.seq LIMIT 1
    ) h
    WHERE h.next_attempt_at <= $1
), chosen AS (
    SELECT * FROM picked ORDER BY next_attempt_at, id LIMIT $3
), claimed AS (
    UPDATE webhook_deliveries d
    SET next_attempt_at = $4::timestamptz + (c.send_at - $1), lease_token = $5
    FROM chosen c
    WHERE d.id = ANY(ARRAY(SELECT id FROM chosen)) AND d.id = c.id
        AND d.{DUE_PREDICATE} AND d.next_attempt_at <= $1
    RETURNING d.id, d.endpoint_id, d.event_id, d.attempt_count, d.status, c.send_at
), paced AS (
    UPDATE webhook_endpoints w SET next_send_at = s.last + make_interval(secs => 1 / w.rate_limit)
    FROM (SELECT endpoint_id, max(send_at) AS last FROM claimed GROUP BY endpoint_id) s
    WHERE w.id = s.endpoint_id AND w.rate_limit IS NOT NULL
)
SELECT c.id, c.endpoint_id, c.event_id, c.attempt_count, c.status, e.type, e.data, e.created_at,
    e.object_url, w.version, w.failing_since IS NOT NULL, c.send_at
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
        skip: Collection[str] = (),
        finished: Collection[str] = (),
    ) -> list[Claim]:
        """Lock the ready endpoints, then claim within their room, in a short transaction of its
        own on the autocommit pool."""
        horizon = now + PACING_HORIZON
        async with db.autocommit() as conn, conn.transaction():
            await conn.execute(PLAN_AND_COMMIT)
            ready = [row[0] for row in await conn.fetch(_READY, now, list(skip), horizon)]
            if not ready:
                return []
            rows = await conn.fetch(
                _CLAIM, now, ready, limit, lease_until, token, horizon, list(finished)
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
