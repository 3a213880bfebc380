"""The sweeper: deletes expired idempotency records (they already count as absent).

A sweep deletes in short batches (`SqlRecordStore.purge_expired`). On SQLite, a sweep that
deleted anything then checkpoints the write-ahead log and truncates it: the log file grows to
hold what a burst of writes and deletes wrote, and SQLite never shrinks it by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Awaitable, Callable

from ustun.idempotency.sql import DEFAULT_SWEEP_INTERVAL, SqlRecordStore
from ustun.store import Database

log = logging.getLogger("ustun.idempotency")

# How long the truncating checkpoint waits for a writer to finish, or for readers of an older
# snapshot, before it gives up until the next sweep: while it waits, new writers wait too.
CHECKPOINT_BUSY_TIMEOUT = 0.1


async def sweep(store: SqlRecordStore) -> int:
    """Purge the expired records, then (SQLite, if any were) checkpoint; return how many."""
    purged = await store.purge_expired()
    if purged and store.db.is_sqlite:
        await checkpoint(store.db)
    return purged


async def checkpoint(db: Database) -> bool:
    """Copy SQLite's write-ahead log into the database file and truncate it to nothing.

    First a PASSIVE checkpoint, which copies what it can while writers go on; then a TRUNCATE
    one, which holds writers off only for what was written meanwhile. Runs on a connection of
    its own, in a thread. False when the log was busy (it is tried again after the next sweep),
    or for a database in memory.
    """
    path = db.engine.url.database
    if not path or path == ":memory:":
        return False
    return await asyncio.to_thread(_checkpoint, path)


def _checkpoint(path: str) -> bool:
    with contextlib.closing(sqlite3.connect(path, timeout=CHECKPOINT_BUSY_TIMEOUT)) as conn:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        log.info("write-ahead log busy: truncated after a later sweep")
    return not busy


def sweeper(
    store: SqlRecordStore, *, interval: float = DEFAULT_SWEEP_INTERVAL
) -> Callable[[asyncio.Event], Awaitable[None]]:
    """A worker loop that sweeps every `interval` seconds until stopped."""

    async def loop(stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            purged = await sweep(store)
            if purged:
                log.info("purged %d expired idempotency records", purged)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), interval)

    return loop
