"""The webhooks store on PostgreSQL: the claim and the settling of outcomes straight on asyncpg.

The claim locks the endpoints it serves with `FOR NO KEY UPDATE SKIP LOCKED` (concurrent
workers take disjoint endpoints, so each endpoint's room is counted by one claim at a time) and
returns, with the rows it leased, what sending needs besides the endpoint itself: the event's
fields, the endpoint's version (so the dispatcher can keep decrypted endpoints until they
change) and each row's send time, in one round trip (a server-side function). Outcomes are
settled in one statement over arrays, whatever the batch size.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.store import Database, UnitOfWork
from ustun.store.listen import Listener
from ustun.store.uow import asyncpg_connection
from ustun.webhooks.adapters.common import SqlStore
from ustun.webhooks.adapters.plans import NOTIFY
from ustun.webhooks.sending.wakeup import CHANNEL
from ustun.webhooks.store import PACING_HORIZON, Attempt, Claim, Settlement

# Statements planned for each execution: a cached generic plan is costed with the table's size
# when it was made, and went on scanning the whole table once a burst arrived.
CUSTOM_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan"

# Lists of ids go as one string, joined by spaces (ids have none): asyncpg encodes a `text[]`
# element by element, 0.27 µs each, where a worker passes hundreds of ids per claim and several
# per delivery settled.
SEPARATOR = " "

# The claim: a server-side function (migrations 0013, 0014) locks the ready endpoints, then
# leases within their room, in turns across accounts, in one round trip. $1 now, $2 endpoints to
# skip, $3 the horizon's end, $4 limit, $5 lease end, $6 lease token, $7 leased rows whose
# request is over (their outcome not recorded yet: not in flight), $8 and $9 accounts and the
# slots each has left, $10 the most any other account may get.
CLAIM = f"""
SELECT * FROM ustun_claim_webhook_deliveries($1, string_to_array($2, '{SEPARATOR}'), $3, $4, $5,
    $6, string_to_array($7, '{SEPARATOR}'), string_to_array($8, '{SEPARATOR}'), $9::int[], $10)
"""  # noqa: S608 - constants only; every value is a bound parameter

# A batch of outcomes in one statement: the fenced delivery updates, joined by primary key to
# the arrays of their new values, and the attempt rows of the deliveries that still exist (an
# endpoint deleted meanwhile took its deliveries along). Planned for each batch (see
# `CUSTOM_PLANS`); the ids are matched through `= ANY(ARRAY(...))`, which the planner takes to
# the primary key, where a join on `d.id = u.id` alone, or `d.lease_token = $6`, led it to scan
# the whole table; each attempt's delivery is looked up by primary key (`OFFSET 0` keeps the
# planner from turning the lookups into a join, which scanned the whole table too).
_SETTLE = f"""
WITH settled AS (
    UPDATE webhook_deliveries d
    SET status = u.status, attempt_count = u.attempt_count, next_attempt_at = u.next_attempt_at,
        lease_token = NULL, updated_at = $5
    FROM unnest(
        string_to_array($1, '{SEPARATOR}'), string_to_array($2, '{SEPARATOR}'), $3::int[],
        $4::timestamptz[]
    ) AS u(id, status, attempt_count, next_attempt_at)
    WHERE d.id = ANY(ARRAY(SELECT unnest(string_to_array($1, '{SEPARATOR}'))))
        AND d.id = u.id AND d.lease_token = $6
)
INSERT INTO webhook_attempts
    (id, delivery_id, attempted_at, status_code, latency_ms, error, response)
SELECT * FROM unnest(
    string_to_array($7, '{SEPARATOR}'), string_to_array($8, '{SEPARATOR}'), $9::timestamptz[],
    $10::int[], $11::float8[], $12::text[], $13::text[]
) AS a(id, delivery_id, attempted_at, status_code, latency_ms, error, response)
WHERE EXISTS (SELECT FROM webhook_deliveries x WHERE x.id = a.delivery_id OFFSET 0)
"""  # noqa: S608 - constants only; every value is a bound parameter

# Every transaction older than the oldest one running on the server has finished.
_OLDEST_RUNNING = text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
_MAX_BIGINT = 2**63 - 1


class PostgresStore(SqlStore):
    """`WebhookStore` on PostgreSQL (asyncpg)."""

    _notifies = True

    async def notify(self, uow: UnitOfWork) -> None:
        """NOTIFY every listening dispatcher; PostgreSQL delivers it only if `uow` commits."""
        await NOTIFY.count(uow.conn, {"channel": CHANNEL})

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
        account_room: Mapping[str, int] = {},
        account_limit: int | None = None,
    ) -> list[Claim]:
        """Lock the ready endpoints, then claim within their room: one call of the claim
        function, in a transaction of its own on the autocommit pool."""
        horizon = now + PACING_HORIZON
        args = (
            now,
            SEPARATOR.join(skip),
            horizon,
            limit,
            lease_until,
            token,
            SEPARATOR.join(finished),
            SEPARATOR.join(account_room),
            list(account_room.values()),
            limit if account_limit is None else account_limit,
        )
        async with db.autocommit() as conn:
            rows = await conn.fetch(CLAIM, *args)
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
        latest = list({row.id: row for row in settled}.values())
        await conn.execute(CUSTOM_PLANS)
        await conn.execute(
            _SETTLE,
            SEPARATOR.join(row.id for row in latest),
            SEPARATOR.join(row.status for row in latest),
            [row.attempt_count for row in latest],
            [row.next_attempt_at for row in latest],
            now,
            token,
            SEPARATOR.join(attempt.id for attempt in attempts),
            SEPARATOR.join(attempt.delivery_id for attempt in attempts),
            [attempt.attempted_at for attempt in attempts],
            [attempt.status_code for attempt in attempts],
            [attempt.latency_ms for attempt in attempts],
            [attempt.error for attempt in attempts],
            [attempt.response for attempt in attempts],
        )
