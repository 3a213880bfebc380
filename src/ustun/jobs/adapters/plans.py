"""The jobs pillar's write path and its reads of one job as plans (`ustun.store.plans`):
written once, run on the async engine's unit of work or on any synchronous DB-API connection
(sqlite3, psycopg 3, Django's).

`enqueue(job, max_pending=...)` is what `ustun.jobs.enqueue` writes: the per-account quota
check (the queue locked until the transaction ends, then its pending jobs counted) and the
job's row. A Django or Flask app runs it on its own connection, in its own transaction:

    run_sync(plans.enqueue(job, max_pending=100), DbapiConnection(connection, "postgresql"))

`job_of`, `named_job`, `events_after` and `result` read one job, its events (the SSE replay) and
its stored result: the async store runs the same statements on `db.read()`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import (
    Integer,
    String,
    bindparam,
    false,
    func,
    insert,
    literal,
    literal_column,
    select,
)

from ustun.jobs import states
from ustun.jobs.records import Job, JobEvent, Result
from ustun.jobs.tables import job_events, job_results, jobs, queue_of
from ustun.store.plans import Plan, count, rows
from ustun.store.statements import FastRow, Statement
from ustun.store.tables import accounts

# A new job's row: what every new job has in common is literal, the nullable columns left out
# (NULL) but its trace context.
INSERT = Statement(
    insert(jobs).values(
        id=bindparam("id", type_=String()),
        account_id=bindparam("account_id", type_=String()),
        kind=bindparam("kind", type_=String()),
        status=literal_column(f"'{states.PENDING}'"),
        payload=bindparam("payload", type_=jobs.c.payload.type),
        progress=literal_column("0"),
        attempts=literal_column("0"),
        max_attempts=bindparam("max_attempts", type_=Integer()),
        run_at=bindparam("run_at", type_=jobs.c.run_at.type),
        cancel_requested=false(),
        has_result=false(),
        version=literal_column("1"),
        created_at=bindparam("created_at", type_=jobs.c.created_at.type),
        updated_at=bindparam("created_at", type_=jobs.c.created_at.type),
        traceparent=bindparam("traceparent", type_=String()),
    )
)

# The pending-jobs quota's lock on one queue, until the transaction ends: on PostgreSQL a
# transaction-level advisory lock on (this class, the hash of its name; two queues whose names
# share a hash only take turns). A job of no account has a queue too, which no account row would
# give. SQLite's `BEGIN IMMEDIATE` already excludes every other writer: nothing to do there.
_QUEUE_LOCKS = 0x6A6F6273  # "jobs"
LOCK_QUEUE = Statement(
    select(literal(1)),
    per_dialect={
        "postgresql": select(
            func.pg_advisory_xact_lock(
                _QUEUE_LOCKS, func.hashtext(bindparam("queue", type_=String()))
            )
        )
    },
)
_PENDING_OF_QUEUE = (
    select(jobs.c.id)
    .where(
        queue_of() == bindparam("queue", type_=String()),
        jobs.c.status == literal_column(f"'{states.PENDING}'"),
    )
    .limit(bindparam("at_most", type_=Integer()))
    .subquery("pending")
)
COUNT_PENDING = Statement(select(func.count().label("pending")).select_from(_PENDING_OF_QUEUE))


def params(job: Job) -> dict[str, Any]:
    """The parameters of `INSERT` for `job`."""
    return {
        "id": job.id,
        "account_id": job.account_id,
        "kind": job.kind,
        "payload": job.payload,
        "max_attempts": job.max_attempts,
        "run_at": job.run_at,
        "created_at": job.created_at,
        "traceparent": job.traceparent,
    }


def insert_jobs(new: Iterable[Job]) -> Plan[None]:
    """Write the rows of the new jobs `new`."""
    for job in new:
        yield count(INSERT, params(job))


def pending_count(account_id: str | None, *, at_most: int) -> Plan[int]:
    """Lock the account's queue until the transaction ends (serialising the quota checks of
    concurrent enqueues), then count its pending jobs: `at_most` at most, so the count never
    reads more of a backlog."""
    queue = account_id or ""
    yield rows(LOCK_QUEUE, {"queue": queue})
    [counted] = yield rows(COUNT_PENDING, {"queue": queue, "at_most": at_most})
    return int(counted.pending)


def enqueue(job: Job, *, max_pending: int | None = None) -> Plan[bool]:
    """Write the new job `job`; with `max_pending`, only if its account has fewer pending jobs
    than that (whether it was written)."""
    if max_pending is not None and (
        (yield from pending_count(job.account_id, at_most=max_pending)) >= max_pending
    ):
        return False
    yield from insert_jobs([job])
    return True


# The account a job belongs to: a job of no account (None) is matched by None.
_OF_ACCOUNT = jobs.c.account_id.is_not_distinct_from(bindparam("account_id", type_=String()))
_JOB_ID = bindparam("job_id", type_=String())
JOB = Statement(select(jobs).where(jobs.c.id == _JOB_ID, _OF_ACCOUNT))
# A host app names its tenants (`account` is the name ustun keeps an accounts row for): reading
# one of their jobs makes no account row.
NAMED_JOB = Statement(
    select(jobs)
    .join(accounts, accounts.c.id == jobs.c.account_id)
    .where(jobs.c.id == _JOB_ID, accounts.c.name == bindparam("account", type_=String()))
)
EVENTS_AFTER = Statement(
    select(job_events)
    .where(
        job_events.c.job_id == _JOB_ID,
        job_events.c.version > bindparam("after", type_=Integer()),
    )
    .order_by(job_events.c.version)
    .limit(bindparam("at_most", type_=Integer()))
)
RESULT = Statement(
    select(job_results.c.content, job_results.c.media_type, job_results.c.filename)
    .join(jobs, jobs.c.id == job_results.c.job_id)
    .where(jobs.c.id == _JOB_ID, _OF_ACCOUNT)
)
# Events per read of one job's (a job retried many times has more: read on from the last).
EVENTS_PAGE = 100


def _one_job(found: list[FastRow]) -> Job | None:
    return Job(**found[0]._mapping) if found else None


def job_of(job_id: str, *, account_id: str | None) -> Plan[Job | None]:
    """The job `job_id` of the account `account_id`, or None."""
    return _one_job((yield rows(JOB, {"job_id": job_id, "account_id": account_id})))


def named_job(job_id: str, *, account: str) -> Plan[Job | None]:
    """The job `job_id` of the account named `account`, or None."""
    return _one_job((yield rows(NAMED_JOB, {"job_id": job_id, "account": account})))


def events_after(job: Job, version: int, *, at_most: int = EVENTS_PAGE) -> Plan[list[JobEvent]]:
    """The job's events newer than `version`, oldest first, `at_most` of its event rows; from
    0, its creation first (read from the job: its first version has no event row)."""
    found = yield rows(EVENTS_AFTER, {"job_id": job.id, "after": version, "at_most": at_most})
    events = [JobEvent(**row._mapping) for row in found]
    return [JobEvent.created(job), *events] if version < 1 else events


def result(job_id: str, *, account_id: str | None) -> Plan[Result | None]:
    """The stored result of the job `job_id` of `account_id`, if it produced one."""
    found = yield rows(RESULT, {"job_id": job_id, "account_id": account_id})
    return Result(found[0].content, found[0].media_type, found[0].filename) if found else None
