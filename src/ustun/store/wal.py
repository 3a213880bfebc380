"""SQLite's write-ahead log: copied into the database file and truncated after a big delete.

The log file grows to hold what a burst of writes and deletes wrote, and SQLite never shrinks it
by itself; a pillar that deletes in bulk (the idempotency sweeper) calls `checkpoint` after.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3

from ustun.store.engine import Database

log = logging.getLogger("ustun.store")

# How long the truncating checkpoint waits for a writer to finish, or for readers of an older
# snapshot, before it gives up until the next call: while it waits, new writers wait too.
CHECKPOINT_BUSY_TIMEOUT = 0.1


async def checkpoint(db: Database) -> bool:
    """Copy SQLite's write-ahead log into the database file and truncate it to nothing.

    First a PASSIVE checkpoint, which copies what it can while writers go on; then a TRUNCATE
    one, which holds writers off only for what was written meanwhile. Runs on a connection of
    its own, in a thread. False when the log was busy (try again later), or for a database in
    memory or not on SQLite.
    """
    path = db.engine.url.database
    if not db.is_sqlite or not path or path == ":memory:":
        return False
    return await asyncio.to_thread(_checkpoint, path)


def _checkpoint(path: str) -> bool:
    with contextlib.closing(sqlite3.connect(path, timeout=CHECKPOINT_BUSY_TIMEOUT)) as conn:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        log.info("write-ahead log busy: truncated on a later checkpoint")
    return not busy
