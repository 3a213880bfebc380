"""What a running job sees: its payload, the database, and how to report progress or stop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, TypeVarTuple

from ustun.errors import JobCancelled, LeaseLost
from ustun.jobs.offload import Offload
from ustun.jobs.records import Job
from ustun.jobs.store import JobStore
from ustun.store import Database

R = TypeVar("R")
Ts = TypeVarTuple("Ts")


class JobContext:
    """Handed to a job's handler; `progress()` and `checkpoint()` are where it may be stopped,
    `offload()` runs its CPU-heavy steps in the runner's worker process."""

    def __init__(self, job: Job, db: Database, store: JobStore, offload: Offload) -> None:
        self.job = job
        self.db = db
        self._store = store
        self._offload = offload
        self.cancel_requested = job.cancel_requested
        self.lost = False
        self._progress = job.progress

    @property
    def payload(self) -> dict[str, Any]:
        """The arguments the job was enqueued with."""
        return self.job.payload

    @property
    def account_id(self) -> str | None:
        """The account the job belongs to."""
        return self.job.account_id

    @property
    def attempt(self) -> int:
        """1 on the first run, 2 on the first retry, …"""
        return self.job.attempts

    def checkpoint(self) -> None:
        """Raise `JobCancelled` if cancellation was asked for, `LeaseLost` if the job is gone."""
        if self.lost:
            raise LeaseLost(f"job {self.job.id} was taken over")
        if self.cancel_requested:
            raise JobCancelled(f"job {self.job.id} was cancelled")

    async def progress(self, percent: int) -> None:
        """Report progress (0-100, never backwards); a good place for the job to be stopped."""
        self.checkpoint()
        percent = max(self._progress, min(100, int(percent)))
        if percent != self._progress:
            self._progress = percent
            self.cancel_requested = await self._store.set_progress(self.db, self.job, percent)
        self.checkpoint()

    async def offload(self, fn: Callable[[*Ts], R], *args: *Ts) -> R:
        """`fn(*args)` in the runner's worker process (a module-level function; it and its
        arguments are pickled): CPU work that would otherwise hold the event loop, and with
        it every request and heartbeat of this process. If the run is stopped meanwhile (its
        lease lost, the worker shutting down), the process computing it is killed."""
        self.checkpoint()
        result = await self._offload.run(fn, *args)
        self.checkpoint()
        return result
