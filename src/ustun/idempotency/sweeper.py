"""The sweeper: deletes expired idempotency records (they already count as absent).

A sweep deletes in short batches (`SqlRecordStore.purge_expired`). On SQLite, a sweep that
deleted anything then checkpoints the write-ahead log and truncates it: the log file grows to
hold what a burst of writes and deletes wrote, and SQLite never shrinks it by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ustun.defaults import DEFAULT_IDEMPOTENCY_SWEEP_INTERVAL
from ustun.idempotency.sql import SqlRecordStore
from ustun.store.wal import checkpoint

log = logging.getLogger("ustun.idempotency")


async def sweep(store: SqlRecordStore) -> int:
    """Purge the expired records, then (SQLite, if any were) checkpoint; return how many."""
    purged = await store.purge_expired()
    if purged:
        await checkpoint(store.db)
    return purged


def sweeper(
    store: SqlRecordStore, *, interval: float = DEFAULT_IDEMPOTENCY_SWEEP_INTERVAL
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
