"""The jobs store on PostgreSQL: the hot statements run as asyncpg prepared statements.

A hot statement (a `Statement`) runs on asyncpg with asyncpg's own type codecs, skipping
SQLAlchemy's per-call execution; outside any unit of work it is ONE autocommit statement on
one of the database's autocommit connections. List parameters are arrays, so a statement's SQL
never changes with its list's length (an expanding IN renders new SQL for every call) and the
prepared statement is reused. A claim picks its batch with `FOR UPDATE SKIP LOCKED`, so
concurrent workers take disjoint batches without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import asyncpg
from sqlalchemy import ARRAY, ColumnElement, Integer, String, any_, bindparam, cast, func

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
from ustun.store.statements import Statement

# The jobs trigger (migrations 0005, 0007) NOTIFYs this channel at an enqueue's commit while a
# worker waits.
CHANNEL = "ustun_jobs"
# The advisory lock that enqueues hold shared until they commit (migration 0007's `GATE`).
_GATE = 8463236172471758690
_REGISTER = (
    "WITH gate AS (SELECT pg_advisory_xact_lock($1))"
    " INSERT INTO job_waiters (pid) SELECT pg_backend_pid() FROM gate ON CONFLICT DO NOTHING"
)
_UNREGISTER = "DELETE FROM job_waiters WHERE pid = pg_backend_pid()"
_FORGET_GONE = "DELETE FROM job_waiters WHERE pid NOT IN (SELECT pid FROM pg_stat_activity)"


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


CLAIM = Statement(claim_statement(lambda kind: _any(kind, "kinds"), lateral=True))
_RENEW = Statement(renew_statement(_any(jobs.c.id, "job_ids")))
_PROGRESS = Statement(progress_statement())
_SETTLE_DONE = Statement(settle_done_statement(*_held_table()))


class PostgresJobStore(SqlJobStore):
    """`JobStore` for PostgreSQL."""

    def __init__(self) -> None:
        super().__init__(claim=CLAIM, renew=_RENEW, progress=_PROGRESS, settle_done=_SETTLE_DONE)

    def _held_params(self, held: Sequence[Job]) -> dict[str, Any]:
        return {
            "held_ids": [job.id for job in held],
            "held_attempts": [job.attempts for job in held],
            "held_lockers": [job.locked_by for job in held],
        }

    def listener(self, db: Database, wake: asyncio.Event) -> JobListener | None:
        """A `LISTEN` on the jobs channel that sets `wake`."""
        return _Waiter(db, wake)


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
