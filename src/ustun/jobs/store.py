"""The storage port of the jobs pillar: every read and write of a job, whatever the database.

Its adapters (`ustun.jobs.adapters`: one for SQLite, one for PostgreSQL) hold each dialect's
tuned SQL; the queue functions, the runner and the sweeper only call this. A claim increments
`attempts`; every later write of that worker matches on `(id, status='processing', locked_by,
attempts)`, so a worker that lost its lease (it stalled, its lease expired, another worker
re-claimed the job) can no longer change the job: the fencing token of DESIGN.md's idempotency
records, applied to jobs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from ustun.jobs import states
from ustun.jobs.records import Backlog, Job, JobEvent, JobPage, Result
from ustun.store import Database, UnitOfWork

# At most this many finished jobs go per `purge`: a full batch means there may be more.
PURGE_BATCH = 500
# Runs inside the transaction that gives a job its final state (done or failed): an outbox.
FinalHook = Callable[[UnitOfWork, Job], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended: the status to record, with its result, its error or its retry delay."""

    status: str
    result: Result | None = None
    error: dict[str, Any] | None = None
    retry_in: float = 0.0

    @property
    def change(self) -> states.Change:
        """The change of the job's state this outcome records."""
        return states.CHANGE_TO[states.known(self.status)]


# The plain `done` without a result: a batch of them is settled in one statement.
DONE = Outcome(states.DONE)


class JobListener(Protocol):
    """Wakes an idle runner when another process enqueues (PostgreSQL `LISTEN/NOTIFY`)."""

    waiting: bool

    async def run(self, stopping: asyncio.Event) -> None:
        """Listen until `stopping` is set, reconnecting after a lost connection."""

    async def idle(self) -> bool:
        """Ask to be notified of enqueues (no-op if already); whether that happened now."""

    async def busy(self) -> None:
        """Stop the notifications asked for by `idle` (no-op unless waiting)."""


class JobStore(Protocol):
    """Every statement the jobs pillar runs, for one database.

    A method runs on what it takes: a `UnitOfWork`, in the caller's transaction (it commits
    with the caller's writes); the `Database`, as its own short transaction or ONE statement
    that commits by itself (joining the unit of work open in this context, if any); reads on
    `db.read()` (one statement each, or the open unit of work's connection, to see its writes).
    """

    async def insert(
        self, uow: UnitOfWork, job: Job, *, committed: Callable[[], Awaitable[None]]
    ) -> None:
        """Write a new job as `uow`'s last work; `committed` runs after its commit (once per
        unit of work)."""

    async def insert_alone(self, db: Database, job: Job) -> None:
        """Write a new job as a statement of its own, committed when this returns."""

    async def count_pending(self, uow: UnitOfWork, account_id: str | None, *, at_most: int) -> int:
        """Lock the account's queue until `uow` ends, then count its pending jobs (with those
        `uow` enqueued), `at_most` at most."""

    async def cancel(self, uow: UnitOfWork, job_id: str, *, account_id: str | None) -> Job | None:
        """Cancel a pending job, or ask a processing one to stop; None if not found."""

    async def finish(
        self, uow: UnitOfWork, job: Job, outcome: Outcome, *, hooks: Sequence[FinalHook] = ()
    ) -> Job:
        """Move a held job to the outcome's status, with its result and final hooks, in `uow`.
        Raises `LeaseLost` if the job is no longer ours."""

    async def recover_expired(
        self, uow: UnitOfWork, *, hooks: Sequence[FinalHook] = ()
    ) -> list[Job]:
        """Give back every job whose lease expired: pending, cancelled, or failed when spent."""

    async def purge(self, uow: UnitOfWork, *, older_than: timedelta) -> int:
        """Delete up to `PURGE_BATCH` jobs finished before now - older_than; how many went."""

    async def claim(
        self, db: Database, *, worker_id: str, kinds: Sequence[str], limit: int, lease: float
    ) -> list[Job]:
        """Move up to `limit` due pending jobs of `kinds` to processing, leased to `worker_id`."""

    async def renew(
        self, db: Database, *, worker_id: str, job_ids: Sequence[str], lease: float
    ) -> dict[str, bool]:
        """Extend the leases `worker_id` still holds; {job id: cancel requested} for them."""

    async def set_progress(self, db: Database, job: Job, percent: int) -> bool:
        """Record progress; whether cancellation was requested. Raises `LeaseLost`."""

    async def settle(
        self,
        db: Database,
        batch: Sequence[tuple[Job, Outcome]],
        *,
        hooks: Sequence[FinalHook] = (),
    ) -> dict[str, Job | None]:
        """Record many outcomes in one transaction; None for a job whose lease was lost."""

    async def get(self, db: Database, job_id: str, *, account_id: str | None) -> Job | None:
        """The job `job_id` of `account_id`, or None."""

    async def events_after(self, db: Database, job: Job, version: int) -> list[JobEvent]:
        """The job's events newer than `version`, oldest first, at most 100."""

    async def result(self, db: Database, job_id: str, *, account_id: str | None) -> Result | None:
        """The stored result of a finished job of `account_id`, if it produced one."""

    async def page(
        self,
        db: Database,
        account_id: str,
        *,
        status: str | None,
        limit: int,
        cursor: str | None,
    ) -> JobPage:
        """The account's jobs (of `status`, if given), newest first, `limit` after `cursor`."""

    async def jobs_by_id(self, db: Database, job_ids: Iterable[str]) -> list[Job]:
        """The jobs of `job_ids` that exist."""

    async def versions(self, db: Database, job_ids: Iterable[str]) -> dict[str, tuple[str, int]]:
        """{job id: (status, version)} of the jobs of `job_ids` that exist."""

    async def events_within(
        self, db: Database, floors: Mapping[str, int], *, window: int
    ) -> list[JobEvent]:
        """Of each job in `floors`, its events after the version given, `window` versions on;
        by job, oldest first."""

    async def backlog(self, db: Database, account_id: str | None = None) -> Backlog:
        """The due pending jobs of one account (read from its own part of the pending jobs'
        index, never another account's backlog), or of all."""

    async def count_by_status(self, db: Database, account_id: str | None = None) -> dict[str, int]:
        """How many jobs of one account, or of all, are in each status (those with any)."""

    def listener(self, db: Database, wake: asyncio.Event) -> JobListener | None:
        """A listener that sets `wake` on enqueues elsewhere; None where only polling works."""
