"""The sweeper: deletes expired idempotency records (they already count as absent)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ustun.idempotency.sql import SqlRecordStore

log = logging.getLogger("ustun.idempotency")

DEFAULT_SWEEP_INTERVAL = 60.0


def sweeper(
    store: SqlRecordStore, *, interval: float = DEFAULT_SWEEP_INTERVAL
) -> Callable[[asyncio.Event], Awaitable[None]]:
    """A worker loop that purges expired records every `interval` seconds until stopped."""

    async def sweep(stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            purged = await store.purge_expired()
            if purged:
                log.info("purged %d expired idempotency records", purged)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), interval)

    return sweep
