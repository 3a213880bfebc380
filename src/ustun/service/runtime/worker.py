"""The background worker: runs every periodic loop of the service until stopped.

`ustun worker` runs it on its own; `ustun serve` embeds it unless `--no-worker`. Each pillar
contributes loops (sweepers, dispatchers, job runners) through `Worker.loops`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ustun.defaults import DEFAULT_JOB_CONCURRENCY
from ustun.idempotency import SqlRecordStore, sweeper
from ustun.jobs import Registry
from ustun.service.runtime.job_loops import job_kinds, job_loops
from ustun.service.runtime.webhook_runtime import dispatcher
from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks import retention

log = logging.getLogger("ustun.worker")

Loop = Callable[[asyncio.Event], Awaitable[None]]


class Worker:
    """Starts the service's background loops and stops them cleanly."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        *,
        concurrency: int = DEFAULT_JOB_CONCURRENCY,
        kinds: Registry | None = None,
    ) -> None:
        """`kinds`: the job kinds to run (by default the service's, `job_kinds(settings)`)."""
        self.db = db
        self.settings = settings
        self.concurrency = concurrency
        kinds = kinds if kinds is not None else job_kinds(settings)
        self.loops: list[Loop] = [*job_loops(db, settings, concurrency, kinds)]
        self.loops.append(dispatcher(db, settings).run)
        self.loops.append(sweeper(SqlRecordStore(db)))
        self.loops.append(retention.sweeper(db, retention=settings.payload_retention_seconds))
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start every loop as a task."""
        self._tasks = [asyncio.create_task(self._guard(loop)) for loop in self.loops]

    async def _guard(self, loop: Loop) -> None:
        while not self._stopping.is_set():
            try:
                await loop(self._stopping)
            except Exception:
                log.exception("worker loop %s failed; restarting it in 1 s", loop)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), 1.0)

    async def stop(self) -> None:
        """Signal every loop to finish and wait for them."""
        self._stopping.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def run_until(self, stop: asyncio.Event) -> None:
        """Run until `stop` is set (the standalone `ustun worker`)."""
        await self.start()
        await stop.wait()
        await self.stop()
