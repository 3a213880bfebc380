"""What workers do with jobs: claim a batch, renew leases, report progress, record the outcome.

A claim increments `attempts`; every later write of that worker matches on
`(id, status='processing', locked_by, attempts)`, so a worker that lost its lease (it stalled,
its lease expired, another worker re-claimed the job) can no longer change the job: the
fencing token of DESIGN.md's idempotency records, applied to jobs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    Integer,
    String,
    Update,
    any_,
    bindparam,
    cast,
    func,
    insert,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import registry as dialects
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import clock
from ustun.http.errors import LeaseLost
from ustun.http.problem import problem
from ustun.jobs import states
from ustun.jobs.queue import status_is
from ustun.jobs.records import Job, Result
from ustun.jobs.registry import FinalHook
from ustun.jobs.tables import job_results, jobs
from ustun.store import Database, UnitOfWork
from ustun.store.types import UTCDateTime
from ustun.store.uow import asyncpg_connection


def _held(job: Job) -> list[ColumnElement[bool]]:
    return [
        jobs.c.id == job.id,
        status_is(states.PROCESSING),
        jobs.c.locked_by == job.locked_by,
        jobs.c.attempts == job.attempts,
    ]


class _Prebuilt:
    """A hot-path statement built once per dialect and, for asyncpg, compiled once to SQL.

    On asyncpg it runs on the driver connection (a prepared statement, asyncpg's own type
    codecs), skipping SQLAlchemy's per-call execution; elsewhere through SQLAlchemy.
    """

    def __init__(self, build: Callable[[bool], Update]) -> None:
        self._statements = {postgres: build(postgres) for postgres in (False, True)}
        compiled = self._statements[True].compile(dialect=dialects.load("postgresql.asyncpg")())
        self._sql = compiled.string
        self._order = compiled.positiontup or []
        self._defaults = compiled.params  # the values SQLAlchemy bound itself

    async def rows(self, conn: AsyncConnection, params: dict[str, Any]) -> list[Any]:
        """Run with `params` in a unit of work; the returned rows as mappings (name to value)."""
        if conn.dialect.driver != "asyncpg":
            postgres = conn.dialect.name == "postgresql"
            return list((await conn.execute(self._statements[postgres], params)).mappings())
        driver = await asyncpg_connection(conn)
        return list(await driver.fetch(self._sql, *self._arguments(params)))

    async def rows_alone(self, db: Database, params: dict[str, Any]) -> list[Any]:
        """`rows` as its own transaction: on PostgreSQL outside any unit of work, one autocommit
        statement on one of the database's autocommit connections."""
        if db.is_sqlite or db.in_unit_of_work():
            async with db.unit_of_work() as uow:
                return await self.rows(uow.conn, params)
        async with db.autocommit() as driver:
            return list(await driver.fetch(self._sql, *self._arguments(params)))

    def _arguments(self, params: dict[str, Any]) -> list[Any]:
        values = {**self._defaults, **params}
        return [values[name] for name in self._order]


def _one_of(column: ColumnElement[str], name: str, postgres: bool) -> ColumnElement[bool]:
    """`column` in the list parameter `name`: on PostgreSQL one array parameter, so the SQL text
    never changes (an expanding IN renders new SQL for every call) and the prepared statement is
    reused."""
    if postgres:
        return column == any_(bindparam(name, type_=ARRAY(String())))
    return column.in_(bindparam(name, expanding=True))


def _claim_statement(postgres: bool) -> Update:
    """The claim, built once: a bounded pick of due pending jobs, moved to processing."""
    now = bindparam("now", type_=UTCDateTime())
    pick = (
        select(jobs.c.id)
        .where(
            status_is(states.PENDING), jobs.c.run_at <= now, _one_of(jobs.c.kind, "kinds", postgres)
        )
        .order_by(jobs.c.run_at, jobs.c.id)
        .limit(bindparam("limit", type_=Integer()))
    )
    if postgres:
        pick = pick.with_for_update(skip_locked=True)
    batch = pick.cte("batch")
    return (
        update(jobs)
        .where(jobs.c.id.in_(select(batch.c.id)))
        .values(
            status=states.check(states.PENDING, states.PROCESSING),
            attempts=jobs.c.attempts + 1,
            locked_by=bindparam("claimer", type_=String()),
            lease_until=bindparam("leased_until", type_=UTCDateTime()),
            started_at=func.coalesce(jobs.c.started_at, now),
            updated_at=now,
            version=jobs.c.version + 1,
        )
        .returning(*jobs.c)
    )


_CLAIM = _Prebuilt(_claim_statement)


async def claim(
    db: Database, *, worker_id: str, kinds: Sequence[str], limit: int, lease: float
) -> list[Job]:
    """Move up to `limit` due pending jobs of `kinds` to processing, leased to `worker_id`.

    PostgreSQL: a CTE picks the batch with `FOR UPDATE SKIP LOCKED`, so concurrent workers take
    disjoint batches without waiting. SQLite: the unit of work is `BEGIN IMMEDIATE`, so the
    pick and the update are already serialised against every other writer.
    """
    now = clock.now()
    params = {
        "now": now,
        "kinds": list(kinds),
        "limit": limit,
        "claimer": worker_id,
        "leased_until": now + timedelta(seconds=lease),
    }
    rows = await _CLAIM.rows_alone(db, params)
    return sorted((Job(**row) for row in rows), key=lambda j: (j.run_at, j.id))


def _renew_statement(postgres: bool) -> Update:
    """The heartbeat, built once: extend the leases a worker still holds."""
    return (
        update(jobs)
        .where(
            _one_of(jobs.c.id, "job_ids", postgres),
            status_is(states.PROCESSING),
            jobs.c.locked_by == bindparam("worker_id", type_=String()),
        )
        .values(lease_until=bindparam("leased_until", type_=UTCDateTime()))
        .returning(jobs.c.id, jobs.c.cancel_requested)
    )


_RENEW = _Prebuilt(_renew_statement)


async def renew(
    db: Database, *, worker_id: str, job_ids: Sequence[str], lease: float
) -> dict[str, bool]:
    """Extend the leases `worker_id` still holds; return {job id: cancel requested} for them."""
    params = {
        "job_ids": list(job_ids),
        "worker_id": worker_id,
        "leased_until": clock.now() + timedelta(seconds=lease),
    }
    rows = await _RENEW.rows_alone(db, params)
    return {row["id"]: row["cancel_requested"] for row in rows}


def _progress_statement(postgres: bool) -> Update:
    """A progress report, built once, fenced like every write of the job's holder."""
    return (
        update(jobs)
        .where(
            jobs.c.id == bindparam("job_id", type_=String()),
            status_is(states.PROCESSING),
            jobs.c.locked_by == bindparam("holder", type_=String()),
            jobs.c.attempts == bindparam("held_attempts", type_=Integer()),
        )
        .values(
            progress=bindparam("percent", type_=Integer()),
            version=jobs.c.version + 1,
            updated_at=bindparam("now", type_=UTCDateTime()),
        )
        .returning(jobs.c.cancel_requested)
    )


_PROGRESS = _Prebuilt(_progress_statement)


async def set_progress(db: Database, job: Job, percent: int) -> bool:
    """Record progress; return whether cancellation was requested. Raises `LeaseLost`."""
    params = {
        "job_id": job.id,
        "holder": job.locked_by,
        "held_attempts": job.attempts,
        "percent": percent,
        "now": clock.now(),
    }
    rows = await _PROGRESS.rows_alone(db, params)
    if not rows:
        raise LeaseLost(f"job {job.id} is no longer leased to {job.locked_by}")
    return bool(rows[0]["cancel_requested"])


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended: the status to record, with its result, its error or its retry delay."""

    status: str
    result: Result | None = None
    error: dict[str, Any] | None = None
    retry_in: float = 0.0


DONE = Outcome(states.DONE)


def _outcome_values(status: str, outcome: Outcome, now: datetime) -> dict[str, Any]:
    values: dict[str, Any] = {
        "status": states.check(status, outcome.status),
        "locked_by": None,
        "lease_until": None,
        "error": outcome.error,
        "version": jobs.c.version + 1,
        "updated_at": now,
    }
    if outcome.status == states.PENDING:
        values["run_at"] = now + timedelta(seconds=outcome.retry_in)
    else:
        values["completed_at"] = now
    if outcome.status == states.DONE:
        values.update(progress=100, has_result=outcome.result is not None)
    return values


async def finish(
    db: Database, job: Job, outcome: Outcome, *, hooks: Sequence[FinalHook] = ()
) -> Job:
    """Move a held job to the outcome's status (done, failed, cancelled, or pending to retry).

    The result, the event and the final hooks (the webhook outbox) commit with the state, or
    nothing does. Raises `LeaseLost` if the job is no longer ours.
    """
    now = clock.now()
    async with db.unit_of_work() as uow:
        row = (
            await uow.conn.execute(
                update(jobs)
                .where(*_held(job))
                .values(**_outcome_values(job.status, outcome, now))
                .returning(*jobs.c)
            )
        ).first()
        if row is None:
            raise LeaseLost(f"job {job.id} is no longer leased to {job.locked_by}")
        changed = Job.from_row(row)
        if outcome.result is not None:
            await uow.conn.execute(
                insert(job_results).values(
                    job_id=job.id,
                    media_type=outcome.result.media_type,
                    filename=outcome.result.filename,
                    content=outcome.result.content,
                    created_at=now,
                )
            )
        await _run_hooks(uow, [changed], hooks)
    return changed


def _settle_done_statement(postgres: bool) -> Update:
    """Many held jobs to `done` in one UPDATE, built once; it returns only what may differ.

    The held `(id, attempts, locked_by)` triples are, on PostgreSQL, three array parameters
    joined as a table (one SQL text for any batch size), elsewhere an expanding IN.
    """
    now = bindparam("now", type_=UTCDateTime())
    settle = update(jobs).where(status_is(states.PROCESSING))
    if postgres:
        arrays = func.unnest(
            cast(bindparam("held_ids"), ARRAY(String())),
            cast(bindparam("held_attempts"), ARRAY(Integer())),
            cast(bindparam("held_lockers"), ARRAY(String())),
        )
        held = arrays.table_valued("id", "attempts", "locked_by").render_derived(name="held")
        settle = settle.where(
            jobs.c.id == held.c.id,
            jobs.c.attempts == held.c.attempts,
            jobs.c.locked_by == held.c.locked_by,
        )
    else:
        triple = tuple_(jobs.c.id, jobs.c.attempts, jobs.c.locked_by)
        settle = settle.where(triple.in_(bindparam("held", expanding=True)))
    return settle.values(
        **_SETTLED_DONE, version=jobs.c.version + 1, updated_at=now, completed_at=now
    ).returning(jobs.c.id, jobs.c.version, jobs.c.cancel_requested)


# What a plain `done` sets besides its version and timestamps (as `_outcome_values` does).
_SETTLED_DONE: dict[str, Any] = {
    "status": states.check(states.PROCESSING, states.DONE),
    "locked_by": None,
    "lease_until": None,
    "error": None,
    "progress": 100,
    "has_result": False,
}
_SETTLE_DONE = _Prebuilt(_settle_done_statement)


def _held_params(held: Sequence[Job], postgres: bool) -> dict[str, Any]:
    """The parameters of `_SETTLE_DONE` that name the held jobs."""
    if postgres:
        return {
            "held_ids": [job.id for job in held],
            "held_attempts": [job.attempts for job in held],
            "held_lockers": [job.locked_by for job in held],
        }
    return {"held": [(job.id, job.attempts, job.locked_by) for job in held]}


async def settle(
    db: Database, batch: Sequence[tuple[Job, Outcome]], *, hooks: Sequence[FinalHook] = ()
) -> dict[str, Job | None]:
    """Record many outcomes in ONE transaction: one commit for a whole batch of jobs.

    Plain `done` outcomes share one UPDATE; the others go one by one. Returns each job's new
    row, or None for a job whose lease was lost (its outcome is dropped, the rest commit).
    """
    settled: dict[str, Job | None] = {job.id: None for job, _ in batch}
    plain = {job.id: job for job, outcome in batch if outcome == DONE}
    now = clock.now()
    params = {**_held_params(list(plain.values()), not db.is_sqlite), "now": now}
    if len(plain) == len(batch) and not hooks:
        rows = await _SETTLE_DONE.rows_alone(db, params)
        settled.update((job.id, job) for job in _settled_done(plain, rows, now))
        return settled
    async with db.unit_of_work() as uow:
        if plain:
            changed = _settled_done(plain, await _SETTLE_DONE.rows(uow.conn, params), now)
            settled.update((job.id, job) for job in changed)
            await _run_hooks(uow, changed, hooks)
        for job, outcome in batch:
            if outcome != DONE:
                with contextlib.suppress(LeaseLost):
                    settled[job.id] = await finish(db, job, outcome, hooks=hooks)
    return settled


def _settled_done(plain: dict[str, Job], rows: Sequence[Any], now: datetime) -> list[Job]:
    """The held jobs `_SETTLE_DONE` moved to done, from the few columns it returns."""
    return [
        replace(
            plain[row["id"]],
            **_SETTLED_DONE,
            version=row["version"],
            cancel_requested=row["cancel_requested"],
            updated_at=now,
            completed_at=now,
        )
        for row in rows
    ]


async def _run_hooks(uow: UnitOfWork, changed: Sequence[Job], hooks: Sequence[FinalHook]) -> None:
    for job in changed:
        if job.status in (states.DONE, states.FAILED):
            for hook in hooks:
                await hook(uow, job)


async def recover_expired(db: Database, *, hooks: Sequence[FinalHook] = ()) -> list[Job]:
    """Give back every job whose lease expired (its worker died or stalled): no manual rescue.

    It goes back to pending while it has attempts left, to cancelled if that was asked for,
    and to failed (with a problem) once its attempts are used up.
    """
    now = clock.now()
    expired = [status_is(states.PROCESSING), jobs.c.lease_until < now]
    common: dict[str, Any] = {
        "locked_by": None,
        "lease_until": None,
        "version": jobs.c.version + 1,
        "updated_at": now,
    }
    lost = problem(
        "job-failed",
        "The job's worker stopped answering on every attempt (it crashed or was killed).",
    )
    outcomes: list[tuple[list[ColumnElement[bool]], dict[str, Any]]] = [
        (
            [~jobs.c.cancel_requested, jobs.c.attempts < jobs.c.max_attempts],
            {"status": states.check(states.PROCESSING, states.PENDING), "run_at": now},
        ),
        (
            [jobs.c.cancel_requested],
            {"status": states.check(states.PROCESSING, states.CANCELLED), "completed_at": now},
        ),
        (
            [~jobs.c.cancel_requested, jobs.c.attempts >= jobs.c.max_attempts],
            {
                "status": states.check(states.PROCESSING, states.FAILED),
                "completed_at": now,
                "error": lost,
            },
        ),
    ]
    recovered: list[Job] = []
    async with db.unit_of_work() as uow:
        for where, values in outcomes:
            rows = (
                await uow.conn.execute(
                    update(jobs)
                    .where(*expired, *where)
                    .values(**common, **values)
                    .returning(*jobs.c)
                )
            ).all()
            changed = [Job.from_row(r) for r in rows]
            await _run_hooks(uow, changed, hooks)
            recovered += changed
    return recovered
