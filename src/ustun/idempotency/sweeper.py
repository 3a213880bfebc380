"""The sweeper: deletes expired idempotency records (they already count as absent).

A sweep deletes in short batches (`SqlRecordStore.purge_expired`). On SQLite, a sweep that
deleted anything then checkpoints the write-ahead log and truncates it: the log file grows to
hold what a burst of writes and deletes wrote, and SQLite never shrinks it by itself.
"""

from __future__ import annotations

import logging

from ustun.defaults import DEFAULT_IDEMPOTENCY_SWEEP_INTERVAL
from ustun.idempotency.sql import SqlRecordStore
from ustun.loops import Loop, every
from ustun.store.wal import checkpoint

log = logging.getLogger("ustun.idempotency")


async def sweep(store: SqlRecordStore) -> int:
    """Purge the expired records, then (SQLite, if any were) checkpoint; return how many."""
    purged = await store.purge_expired()
    if purged:
        await checkpoint(store.db)
    return purged


def sweeper(store: SqlRecordStore, *, interval: float = DEFAULT_IDEMPOTENCY_SWEEP_INTERVAL) -> Loop:
    """A worker loop that sweeps every `interval` seconds until stopped."""

    async def once() -> None:
        purged = await sweep(store)
        if purged:
            log.info("purged %d expired idempotency records", purged)

    return every(interval, once)
