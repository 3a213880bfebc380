"""What apps do with jobs: enqueue inside their unit of work, read, cancel, fetch results.

`enqueue` joins the caller's unit of work, so the job row commits (or rolls back) with the
caller's own writes: the row is its own outbox. The row is written as the transaction's last
work (so it is not visible inside the unit of work before its commit); when it is the only
write, on PostgreSQL it is one autocommit INSERT. Outside any unit of work it is that INSERT on
one of the database's autocommit connections, without SQLAlchemy. Workers are woken only after
the commit (the jobs trigger's NOTIFY, sent while a worker waits, is delivered at commit; this
process's runners by an after-commit hook).
"""

from __future__ import annotations

import functools
import json
import weakref
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, delete, insert, literal_column, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import clock, ids
from ustun.jobs import states, wakeup
from ustun.jobs.records import Job, JobEvent, Result
from ustun.jobs.registry import Registry, registry
from ustun.jobs.tables import job_events, job_results, jobs
from ustun.settings import DEFAULT_JOB_MAX_ATTEMPTS
from ustun.store import Database, UnitOfWork
from ustun.store.uow import asyncpg_connection

PURGE_BATCH = 500
_INSERT = insert(jobs)
# The same row through asyncpg itself: the columns every new job has in common are literals,
# the nullable ones left out (NULL).
_PG_INSERT = (
    "INSERT INTO jobs (id, account_id, kind, status, payload, progress, attempts, max_attempts,"
    " run_at, cancel_requested, has_result, version, created_at, updated_at)"
    " VALUES ($1, $2, $3, 'pending', $4, 0, 0, $5, $6, false, false, 1, $7, $7)"
)
# The jobs each open unit of work has enqueued, written by its at-commit hook.
_new_jobs: weakref.WeakKeyDictionary[UnitOfWork, list[Job]] = weakref.WeakKeyDictionary()


def status_is(status: str) -> ColumnElement[bool]:
    """`jobs.status = '<status>'` with the status inlined, so the partial indexes apply."""
    return jobs.c.status == literal_column(f"'{states.check_known(status)}'")


async def enqueue(
    db: Database,
    kind: str,
    payload: dict[str, Any] | None = None,
    *,
    account_id: str | None = None,
    max_attempts: int | None = None,
    run_at: datetime | None = None,
    kinds: Registry = registry,
) -> Job:
    """Add a `pending` job in the caller's unit of work (or a new one) and return it."""
    known = kinds.get(kind)
    attempts = max_attempts or (known and known.max_attempts) or DEFAULT_JOB_MAX_ATTEMPTS
    now = clock.now()
    job = Job(
        id=ids.new_id("job"),
        account_id=account_id,
        kind=kind,
        status=states.PENDING,
        payload=payload or {},
        progress=0,
        attempts=0,
        max_attempts=attempts,
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
    )
    if not db.is_sqlite and not db.in_unit_of_work():
        async with db.autocommit() as conn:
            await conn.execute(_PG_INSERT, *_pg_row(job))
        await wakeup.wake_local()
        return job
    async with db.unit_of_work() as uow:
        new = _new_jobs.get(uow)
        if new is None:
            new = _new_jobs[uow] = []
            # The hook holds the connection, not the unit of work (the weak key).
            uow.at_commit(functools.partial(_insert, uow.conn, new))
            # This process's runners at once; other processes by the trigger's NOTIFY.
            uow.after_commit(wakeup.wake_local)
        new.append(job)
    return job


def _pg_row(job: Job) -> tuple[Any, ...]:
    """The parameters of `_PG_INSERT` for `job`."""
    return (
        job.id,
        job.account_id,
        job.kind,
        json.dumps(job.payload),
        job.max_attempts,
        job.run_at,
        job.created_at,
    )


def _values(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in Job.__slots__}


async def _insert(conn: AsyncConnection, new: list[Job], alone: bool) -> None:
    """Write a unit of work's new jobs, its last work before COMMIT.

    On PostgreSQL through its asyncpg connection (skipping SQLAlchemy's statement machinery);
    one job in a unit of work that wrote nothing else is one autocommit INSERT.
    """
    if conn.dialect.driver != "asyncpg":
        await conn.execute(_INSERT, [_values(job) for job in new])
        return
    driver = await asyncpg_connection(conn, begin=not alone or len(new) > 1)
    rows = [_pg_row(job) for job in new]
    if len(rows) == 1:
        await driver.execute(_PG_INSERT, *rows[0])
    else:
        await driver.executemany(_PG_INSERT, rows)


def _owned(job_id: str, account_id: str | None) -> list[ColumnElement[bool]]:
    return [jobs.c.id == job_id, jobs.c.account_id == account_id]


async def get(db: Database, job_id: str, *, account_id: str | None) -> Job | None:
    """The job `job_id` of `account_id`, or None."""
    async with db.read() as conn:
        row = (await conn.execute(select(jobs).where(*_owned(job_id, account_id)))).first()
    return Job.from_row(row) if row else None


async def cancel(db: Database, job_id: str, *, account_id: str | None) -> Job | None:
    """Cancel a pending job at once, or ask a processing one to stop (cooperatively).

    Raises `IllegalTransition` (409) when the job has already finished; None if not found.
    """
    now = clock.now()
    async with db.unit_of_work() as uow:
        row = (
            await uow.conn.execute(
                select(jobs).where(*_owned(job_id, account_id)).with_for_update()
            )
        ).first()
        if row is None:
            return None
        job = Job.from_row(row)
        if job.status == states.PROCESSING:
            if job.cancel_requested:
                return job
            values: dict[str, Any] = {"cancel_requested": True}
        else:
            values = {"status": states.check(job.status, states.CANCELLED), "completed_at": now}
        changed = await uow.conn.execute(
            update(jobs)
            .where(jobs.c.id == job.id)
            .values(**values, version=jobs.c.version + 1, updated_at=now)
            .returning(*jobs.c)
        )
        return Job.from_row(changed.one())


async def events_after(db: Database, job: Job, version: int) -> list[JobEvent]:
    """The job's events newer than `version`, oldest first, at most 100 (the SSE replay)."""
    async with db.read() as conn:
        rows = (
            await conn.execute(
                select(job_events)
                .where(job_events.c.job_id == job.id, job_events.c.version > version)
                .order_by(job_events.c.version)
                .limit(100)
            )
        ).all()
    events = [JobEvent(**row._mapping) for row in rows]
    return [JobEvent.created(job), *events] if version < 1 else events


async def result(db: Database, job_id: str, *, account_id: str | None) -> Result | None:
    """The stored result of a finished job of `account_id`, if it produced one."""
    async with db.read() as conn:
        row = (
            await conn.execute(
                select(job_results)
                .join(jobs, jobs.c.id == job_results.c.job_id)
                .where(*_owned(job_id, account_id))
            )
        ).first()
    return Result(row.content, row.media_type, row.filename) if row else None


async def purge(db: Database, *, older_than: timedelta) -> int:
    """Delete finished jobs (with their events and results) completed before now - older_than."""
    cutoff = clock.now() - older_than
    async with db.unit_of_work() as uow:
        doomed = (
            await uow.conn.scalars(
                select(jobs.c.id).where(jobs.c.completed_at < cutoff).limit(PURGE_BATCH)
            )
        ).all()
        if doomed:
            await uow.conn.execute(delete(job_events).where(job_events.c.job_id.in_(doomed)))
            await uow.conn.execute(delete(job_results).where(job_results.c.job_id.in_(doomed)))
            await uow.conn.execute(delete(jobs).where(jobs.c.id.in_(doomed)))
    return len(doomed)
