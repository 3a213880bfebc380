"""What a running job sees: its payload, the database, and how to report progress or stop."""

from __future__ import annotations

from typing import Any

from ustun.http.errors import JobCancelled, LeaseLost
from ustun.jobs.records import Job
from ustun.jobs.store import JobStore
from ustun.store import Database


class JobContext:
    """Handed to a job's handler; `progress()` and `checkpoint()` are where it may be stopped."""

    def __init__(self, job: Job, db: Database, store: JobStore) -> None:
        self.job = job
        self.db = db
        self._store = store
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
            self.cancel_requested = await self._store.set_progress(self.job, percent)
        self.checkpoint()
