"""The sweeper: finished jobs are kept for the retention period (7 days), then purged."""

from __future__ import annotations

from datetime import timedelta

from ustun.defaults import DEFAULT_JOB_SWEEP_INTERVAL
from ustun.jobs.queue import purge
from ustun.jobs.store import PURGE_BATCH
from ustun.loops import Loop, every
from ustun.store import Database


def purge_loop(
    db: Database, *, retention: float, interval: float = DEFAULT_JOB_SWEEP_INTERVAL
) -> Loop:
    """A worker loop that deletes finished jobs older than `retention` seconds, in batches."""

    async def once() -> None:
        purged = PURGE_BATCH
        while purged == PURGE_BATCH:
            purged = await purge(db, older_than=timedelta(seconds=retention))

    return every(interval, once)
