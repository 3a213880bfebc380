"""Waking idle workers: in-process at once, across processes by PostgreSQL `LISTEN/NOTIFY`.

Polling stays as the fallback (SQLite across processes, a dropped listener connection), so a
lost notification only ever delays a job by one poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg

from ustun.store import Database

log = logging.getLogger("ustun.jobs")

# The jobs trigger (migration 0005) NOTIFYs this channel when a job becomes pending.
CHANNEL = "ustun_jobs"
_RECONNECT_DELAY = 1.0
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


def _dsn(db: Database) -> str:
    return db.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


async def listen(db: Database, wake: asyncio.Event, stopping: asyncio.Event) -> None:
    """Keep a dedicated connection LISTENing and set `wake` on each notification."""

    def on_notify(*_: Any) -> None:
        wake.set()

    while not stopping.is_set():
        conn = None
        try:
            conn = await asyncpg.connect(_dsn(db))
            closed = asyncio.Event()
            conn.add_termination_listener(lambda _conn, closed=closed: closed.set())
            await conn.add_listener(CHANNEL, on_notify)
            wake.set()  # anything enqueued while we were not listening
            waiters = [asyncio.create_task(closed.wait()), asyncio.create_task(stopping.wait())]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("job listener disconnected (%s); polling until it reconnects", exc)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close(timeout=2)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), _RECONNECT_DELAY)
