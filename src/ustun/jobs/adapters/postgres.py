"""The jobs store on PostgreSQL: the hot statements compiled once and run on asyncpg itself.

A hot statement runs as an asyncpg prepared statement with asyncpg's own type codecs, skipping
SQLAlchemy's per-call execution; outside any unit of work it is ONE autocommit statement on
one of the database's autocommit connections. List parameters are arrays, so a statement's SQL
never changes with its list's length (an expanding IN renders new SQL for every call) and the
prepared statement is reused. A claim picks its batch with `FOR UPDATE SKIP LOCKED`, so
concurrent workers take disjoint batches without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
from sqlalchemy import (
    ARRAY,
    ColumnElement,
    Integer,
    String,
    Update,
    any_,
    bindparam,
    cast,
    func,
    select,
)
from sqlalchemy.dialects import registry as dialects
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.jobs.adapters.sql import (
    SqlJobStore,
    claim_statement,
    progress_statement,
    renew_statement,
    settle_done_statement,
)
from ustun.jobs.records import Job
from ustun.jobs.store import JobListener
from ustun.jobs.tables import jobs
from ustun.store import Database
from ustun.store.listen import LOST, Listener
from ustun.store.uow import asyncpg_connection

_ASYNCPG = dialects.load("postgresql.asyncpg")()
# A new job's row: the columns every new job has in common are literals, the nullable ones
# left out (NULL).
INSERT = (
    "INSERT INTO jobs (id, account_id, kind, status, payload, progress, attempts, max_attempts,"
    " run_at, cancel_requested, has_result, version, created_at, updated_at)"
    " VALUES ($1, $2, $3, 'pending', $4, 0, 0, $5, $6, false, false, 1, $7, $7)"
)
# The jobs trigger (migrations 0005, 0007) NOTIFYs this channel at an enqueue's commit while a
# worker waits.
CHANNEL = "ustun_jobs"
# The advisory lock that enqueues hold shared until they commit (migration 0007's `GATE`).
_GATE = 8463236172471758690
_REGISTER = (
    "WITH gate AS (SELECT pg_advisory_xact_lock($1))"
    " INSERT INTO job_waiters (pid) SELECT pg_backend_pid() FROM gate ON CONFLICT DO NOTHING"
)
# The pending-jobs quota's lock on one queue: (this class, the hash of its name). Two queues
# whose names share a hash only take turns.
_QUEUE_LOCKS = 0x6A6F6273  # "jobs"
_LOCK_QUEUE = select(
    func.pg_advisory_xact_lock(_QUEUE_LOCKS, func.hashtext(bindparam("queue", type_=String())))
)
_UNREGISTER = "DELETE FROM job_waiters WHERE pid = pg_backend_pid()"
_FORGET_GONE = "DELETE FROM job_waiters WHERE pid NOT IN (SELECT pid FROM pg_stat_activity)"


class _Prepared:
    """A hot statement compiled once to asyncpg's SQL, run on the driver connection."""

    def __init__(self, statement: Update) -> None:
        compiled = statement.compile(dialect=_ASYNCPG)
        self.sql = compiled.string
        self._order = compiled.positiontup or []
        self._defaults = compiled.params  # the values SQLAlchemy bound itself

    async def rows(self, conn: AsyncConnection, params: dict[str, Any]) -> list[Any]:
        """Run with `params` in the unit of work on `conn`; the returned rows."""
        driver = await asyncpg_connection(conn)
        return list(await driver.fetch(self.sql, *self.arguments(params)))

    async def rows_alone(self, db: Database, params: dict[str, Any]) -> list[Any]:
        """`rows` in the unit of work open in this context, or else one autocommit statement."""
        if db.in_unit_of_work():
            async with db.unit_of_work() as uow:
                return await self.rows(uow.conn, params)
        async with db.autocommit() as driver:
            return list(await driver.fetch(self.sql, *self.arguments(params)))

    def arguments(self, params: dict[str, Any]) -> list[Any]:
        """The positional arguments of `sql` for `params`."""
        values = {**self._defaults, **params}
        return [values[name] for name in self._order]


def _any(column: ColumnElement[str], name: str) -> ColumnElement[bool]:
    """`column` is in the array parameter `name`."""
    return column == any_(bindparam(name, type_=ARRAY(String())))


def _held_table() -> list[ColumnElement[bool]]:
    """The held `(id, attempts, locked_by)` triples: three array parameters joined as a table."""
    arrays = func.unnest(
        cast(bindparam("held_ids"), ARRAY(String())),
        cast(bindparam("held_attempts"), ARRAY(Integer())),
        cast(bindparam("held_lockers"), ARRAY(String())),
    )
    held = arrays.table_valued("id", "attempts", "locked_by").render_derived(name="held")
    return [
        jobs.c.id == held.c.id,
        jobs.c.attempts == held.c.attempts,
        jobs.c.locked_by == held.c.locked_by,
    ]


CLAIM = _Prepared(claim_statement(lambda kind: _any(kind, "kinds"), lateral=True))
_RENEW = _Prepared(renew_statement(_any(jobs.c.id, "job_ids")))
_PROGRESS = _Prepared(progress_statement())
_SETTLE_DONE = _Prepared(settle_done_statement(*_held_table()))


class PostgresJobStore(SqlJobStore):
    """`JobStore` for PostgreSQL."""

    def __init__(self, db: Database) -> None:
        super().__init__(
            db, claim=CLAIM, renew=_RENEW, progress=_PROGRESS, settle_done=_SETTLE_DONE
        )

    async def insert(self, job: Job, *, committed: Callable[[], Awaitable[None]]) -> None:
        """Outside any unit of work, one autocommit INSERT without SQLAlchemy; else at commit."""
        if self.db.in_unit_of_work():
            await super().insert(job, committed=committed)
            return
        async with self.db.autocommit() as conn:
            await conn.execute(INSERT, *_row(job))
        await committed()

    async def _write_new(self, conn: AsyncConnection, new: list[Job], alone: bool) -> None:
        """On the unit of work's asyncpg connection; one job in a unit of work that wrote
        nothing else is one autocommit INSERT."""
        driver = await asyncpg_connection(conn, begin=not alone or len(new) > 1)
        rows = [_row(job) for job in new]
        if len(rows) == 1:
            await driver.execute(INSERT, *rows[0])
        else:
            await driver.executemany(INSERT, rows)

    def _held_params(self, held: Sequence[Job]) -> dict[str, Any]:
        return {
            "held_ids": [job.id for job in held],
            "held_attempts": [job.attempts for job in held],
            "held_lockers": [job.locked_by for job in held],
        }

    async def _lock_queue(self, conn: AsyncConnection, queue: str) -> None:
        """A transaction-level advisory lock on the queue's name (a job of no account has one
        too, which no account row would give)."""
        await conn.execute(_LOCK_QUEUE, {"queue": queue})

    def listener(self, wake: asyncio.Event) -> JobListener | None:
        """A `LISTEN` on the jobs channel that sets `wake`."""
        return _Waiter(self.db, wake)


def _row(job: Job) -> tuple[Any, ...]:
    """The parameters of `INSERT` for `job`."""
    return (
        job.id,
        job.account_id,
        job.kind,
        json.dumps(job.payload),
        job.max_attempts,
        job.run_at,
        job.created_at,
    )


class _Waiter:
    """A listener on the jobs channel that registers as waiting only while its runner idles.

    The jobs trigger notifies only while some worker is registered as waiting (migration
    0007): `idle()` registers this connection (after every enqueue that may have missed the
    registration has committed), `busy()` takes it back. Its row goes with its connection: a
    new connection deletes the rows of backends that no longer exist.
    """

    def __init__(self, db: Database, wake: asyncio.Event) -> None:
        self._listener = Listener(
            db.dsn, CHANNEL, wake.set, on_connect=self._connected, on_close=self._closing
        )
        self.waiting = False

    async def run(self, stopping: asyncio.Event) -> None:
        """Listen until `stopping` is set, reconnecting after a lost connection."""
        await self._listener.run(stopping)

    async def idle(self) -> bool:
        """Register as waiting (no-op if already); whether a registration happened now."""
        async with self._listener.connection() as conn:
            if self.waiting or conn is None:
                return False
            with contextlib.suppress(*LOST):
                await conn.execute(_REGISTER, _GATE)
                self.waiting = True
            return self.waiting

    async def busy(self) -> None:
        """Stop the notifications this worker asked for (no-op unless waiting)."""
        async with self._listener.connection() as conn:
            if not self.waiting or conn is None:
                return
            with contextlib.suppress(*LOST):
                await conn.execute(_UNREGISTER)
                self.waiting = False

    async def _connected(self, conn: asyncpg.Connection) -> None:
        await conn.execute(_FORGET_GONE)

    async def _closing(self, conn: asyncpg.Connection) -> None:
        self.waiting = False
        await conn.execute(_UNREGISTER)
