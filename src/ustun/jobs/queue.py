"""What apps do with jobs: enqueue inside their unit of work, read, cancel, fetch results.

`enqueue` joins the caller's unit of work, so the job row commits (or rolls back) with the
caller's own writes: the row is its own outbox. Outside any unit of work it is one statement
of its own. Workers are woken only after the commit (the jobs trigger's NOTIFY, sent while a
worker waits, is delivered at commit; this process's runners by an after-commit hook).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ustun import clock, ids, tracing
from ustun.defaults import DEFAULT_JOB_MAX_ATTEMPTS
from ustun.errors import ProblemError
from ustun.http.retry_after import format_retry_after
from ustun.jobs import states, wakeup
from ustun.jobs.adapters import plans as job_plans
from ustun.jobs.adapters import store_for
from ustun.jobs.records import Job, JobEvent, JobPage, Result
from ustun.jobs.registry import Registry
from ustun.store import Database
from ustun.store.accounts import account_id as named_account
from ustun.store.dbapi import DbapiConnection
from ustun.store.plans import run_sync

# When an account at its pending-jobs quota may try again: a queue drains as jobs run.
PENDING_RETRY_AFTER = 30


async def enqueue(
    db: Database,
    kind: str,
    payload: dict[str, Any] | None = None,
    *,
    account_id: str | None = None,
    max_attempts: int | None = None,
    run_at: datetime | None = None,
    kinds: Registry | None = None,
    max_pending: int | None = None,
) -> Job:
    """Add a `pending` job in the caller's unit of work (or a new one) and return it.

    Its maximum number of attempts: `max_attempts`, else its kind's in `kinds` (if given and
    known there), else `DEFAULT_JOB_MAX_ATTEMPTS`.

    With `max_pending` (None: no limit), raise 429 `quota-exceeded` instead if the account
    already has that many pending jobs. They are counted under a lock on the account's queue
    held until the unit of work ends, so concurrent enqueues never exceed it.
    """
    known = kinds.get(kind) if kinds is not None else None
    attempts = max_attempts or (known and known.max_attempts) or DEFAULT_JOB_MAX_ATTEMPTS
    job = new_job(kind, payload, account_id=account_id, max_attempts=attempts, run_at=run_at)
    store = store_for(db)
    if max_pending is None and not db.in_unit_of_work():
        await store.insert_alone(db, job)
        await wakeup.wake_local()
        return job
    async with db.unit_of_work() as uow:
        if (
            max_pending is not None
            and await store.count_pending(uow, account_id, at_most=max_pending) >= max_pending
        ):
            raise quota_exceeded(max_pending)
        await store.insert(uow, job, committed=wakeup.wake_local)
    return job


def enqueue_on(
    conn: DbapiConnection,
    kind: str,
    payload: dict[str, Any] | None = None,
    *,
    account: str,
    max_pending: int | None = None,
) -> Job:
    """`enqueue` on a host framework's synchronous connection, in the transaction it has open,
    for the account named `account` (made on first use); 429 `quota-exceeded` (a
    `ProblemError`) when it has `max_pending` pending jobs already."""
    job = new_job(kind, payload, account_id=run_sync(named_account(account), conn))
    if not run_sync(job_plans.enqueue(job, max_pending=max_pending), conn):
        raise quota_exceeded(max_pending or 0)
    return job


def quota_exceeded(max_pending: int) -> ProblemError:
    """429 `quota-exceeded`: the account already has `max_pending` pending jobs."""
    return ProblemError(
        "quota-exceeded",
        f"This account has {max_pending} pending jobs, the most it may have waiting. "
        "Retry after the number of seconds in Retry-After, when some have run.",
        headers={"retry-after": format_retry_after(PENDING_RETRY_AFTER)},
        limit=max_pending,
    )


def new_job(
    kind: str,
    payload: dict[str, Any] | None = None,
    *,
    account_id: str | None = None,
    max_attempts: int = DEFAULT_JOB_MAX_ATTEMPTS,
    run_at: datetime | None = None,
) -> Job:
    """A new `pending` job, not yet written (`ustun.jobs.adapters.plans.enqueue` writes it on
    any connection)."""
    now = clock.now()
    return Job(
        id=ids.new_id("job"),
        account_id=account_id,
        kind=kind,
        status=states.PENDING,
        payload=payload or {},
        progress=0,
        attempts=0,
        max_attempts=max_attempts,
        run_at=run_at or now,
        locked_by=None,
        lease_until=None,
        cancel_requested=False,
        error=None,
        has_result=False,
        version=1,
        created_at=now,
        updated_at=now,
        started_at=None,
        completed_at=None,
        traceparent=tracing.current_traceparent(),
    )


async def get(db: Database, job_id: str, *, account_id: str | None) -> Job | None:
    """The job `job_id` of `account_id`, or None."""
    return await store_for(db).get(db, job_id, account_id=account_id)


async def page(
    db: Database, account_id: str, *, status: str | None, limit: int, cursor: str | None
) -> JobPage:
    """The account's jobs (of `status`, if given), newest first: `limit` of them after the job
    `cursor` (the `next_cursor` of the page before, None for the first page)."""
    return await store_for(db).page(db, account_id, status=status, limit=limit, cursor=cursor)


async def cancel(db: Database, job_id: str, *, account_id: str | None) -> Job | None:
    """Cancel a pending job at once, or ask a processing one to stop (cooperatively).

    Raises `IllegalTransition` (409) when the job has already finished; None if not found.
    """
    async with db.unit_of_work() as uow:
        return await store_for(db).cancel(uow, job_id, account_id=account_id)


async def events_after(db: Database, job: Job, version: int) -> list[JobEvent]:
    """The job's events newer than `version`, oldest first, at most 100 (the SSE replay)."""
    return await store_for(db).events_after(db, job, version)


async def result(db: Database, job_id: str, *, account_id: str | None) -> Result | None:
    """The stored result of a finished job of `account_id`, if it produced one."""
    return await store_for(db).result(db, job_id, account_id=account_id)


async def purge(db: Database, *, older_than: timedelta) -> int:
    """Delete finished jobs (with their events and results) completed before now - older_than,
    at most `PURGE_BATCH` per call; how many went."""
    async with db.unit_of_work() as uow:
        return await store_for(db).purge(uow, older_than=older_than)
