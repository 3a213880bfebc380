"""Waking idle workers: in-process at once, across processes by PostgreSQL `LISTEN/NOTIFY`.

Polling stays as the fallback (SQLite across processes, a dropped listener connection), so a
lost notification only ever delays a job by one poll interval. A worker that keeps finding
jobs claims on a short timer instead, and asks for no notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg

from ustun.store import Database

log = logging.getLogger("ustun.jobs")

# The jobs trigger (migrations 0005, 0007) NOTIFYs this channel at an enqueue's commit while a
# worker waits.
CHANNEL = "ustun_jobs"
_RECONNECT_DELAY = 1.0
# The advisory lock that enqueues hold shared until they commit (migration 0007's `GATE`).
_GATE = 8463236172471758690
_REGISTER = (
    "WITH gate AS (SELECT pg_advisory_xact_lock($1))"
    " INSERT INTO job_waiters (pid) SELECT pg_backend_pid() FROM gate ON CONFLICT DO NOTHING"
)
_UNREGISTER = "DELETE FROM job_waiters WHERE pid = pg_backend_pid()"
_LOST = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
_FORGET_GONE = "DELETE FROM job_waiters WHERE pid NOT IN (SELECT pid FROM pg_stat_activity)"
_local: set[asyncio.Event] = set()


def subscribe(event: asyncio.Event) -> None:
    """Set `event` whenever a job is enqueued by this process."""
    _local.add(event)


def unsubscribe(event: asyncio.Event) -> None:
    """Stop setting `event`."""
    _local.discard(event)


async def wake_local() -> None:
    """Wake this process's runners (an after-commit hook of the enqueueing unit of work)."""
    for event in tuple(_local):
        event.set()


class Listener:
    """A dedicated connection LISTENing for enqueues, which sets `wake` on each notification.

    The jobs trigger notifies only while some worker is registered as waiting (migration
    0007): `idle()` registers this connection (after every enqueue that may have missed the
    registration has committed), `busy()` takes it back. Its row goes with its connection: a
    new connection deletes the rows of backends that no longer exist.
    """

    def __init__(self, db: Database, wake: asyncio.Event) -> None:
        self._db = db
        self._wake = wake
        self._conn: asyncpg.Connection | None = None
        self._using = asyncio.Lock()  # one statement at a time on the connection
        self.waiting = False

    async def idle(self) -> bool:
        """Register as waiting (no-op if already); whether a registration happened now."""
        async with self._using:
            if self.waiting or self._conn is None:
                return False
            with contextlib.suppress(*_LOST):
                await self._conn.execute(_REGISTER, _GATE)
                self.waiting = True
            return self.waiting

    async def busy(self) -> None:
        """Stop the notifications this worker asked for (no-op unless waiting)."""
        async with self._using:
            if not self.waiting or self._conn is None:
                return
            with contextlib.suppress(*_LOST):
                await self._conn.execute(_UNREGISTER)
                self.waiting = False

    async def run(self, stopping: asyncio.Event) -> None:
        """LISTEN until `stopping` is set, reconnecting after a lost connection."""

        def on_notify(*_: Any) -> None:
            self._wake.set()

        while not stopping.is_set():
            conn = None
            try:
                conn = await asyncpg.connect(self._db.dsn)
                closed = asyncio.Event()
                conn.add_termination_listener(lambda _conn, closed=closed: closed.set())
                await conn.add_listener(CHANNEL, on_notify)
                await conn.execute(_FORGET_GONE)
                self._conn = conn
                self._wake.set()  # anything enqueued while we were not listening
                waiters = [asyncio.create_task(closed.wait()), asyncio.create_task(stopping.wait())]
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiter in waiters:
                        waiter.cancel()
            except _LOST as exc:
                log.warning("job listener disconnected (%s); polling until it reconnects", exc)
            finally:
                async with self._using:
                    self._conn, self.waiting = None, False
                    if conn is not None:
                        with contextlib.suppress(Exception):
                            await conn.execute(_UNREGISTER)
                        with contextlib.suppress(Exception):
                            await conn.close(timeout=2)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), _RECONNECT_DELAY)
