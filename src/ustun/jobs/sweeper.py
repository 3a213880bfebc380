"""The sweeper: finished jobs are kept for the retention period (7 days), then purged."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import timedelta

from ustun.jobs.adapters import store_for
from ustun.jobs.store import PURGE_BATCH
from ustun.store import Database

SWEEP_INTERVAL = 60.0


def purge_loop(
    db: Database, *, retention: float, interval: float = SWEEP_INTERVAL
) -> Callable[[asyncio.Event], Awaitable[None]]:
    """A worker loop that deletes finished jobs older than `retention` seconds, in batches."""
    store = store_for(db)

    async def loop(stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            purged = PURGE_BATCH
            while purged == PURGE_BATCH:
                purged = await store.purge(older_than=timedelta(seconds=retention))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), interval)

    return loop
