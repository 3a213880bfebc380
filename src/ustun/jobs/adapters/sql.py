"""What both SQL adapters share: the statements whose SQL is the same on every database, the
shapes of the hot ones (each adapter fills in its own dialect's parts), and the settle logic.

The hot statements are `ustun.store.statements.Statement`s, run on the driver connection; the
rest go through SQLAlchemy. A new job is written as its unit of work's last work (so it is not
visible inside the unit of work before its commit): the row is its own outbox, committed or
rolled back with the caller's writes, through the plan `plans.insert_jobs`.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    CTE,
    BindParameter,
    ColumnElement,
    Integer,
    Select,
    String,
    Update,
    and_,
    any_,
    bindparam,
    delete,
    func,
    insert,
    literal_column,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.selectable import NamedFromClause

from ustun import clock, tracing
from ustun.errors import LeaseLost
from ustun.http.problem import problem
from ustun.jobs import states
from ustun.jobs.adapters import plans
from ustun.jobs.records import Backlog, Job, JobEvent, JobPage, Result
from ustun.jobs.states import Change
from ustun.jobs.store import DONE, PURGE_BATCH, FinalHook, Outcome
from ustun.jobs.tables import job_events, job_results, jobs, queue_of
from ustun.store import Database, UnitOfWork
from ustun.store.plans import run
from ustun.store.statements import Statement
from ustun.store.types import UTCDateTime

# The jobs each open unit of work has enqueued, written by its at-commit hook.
_new_jobs: weakref.WeakKeyDictionary[UnitOfWork, list[Job]] = weakref.WeakKeyDictionary()


def status_is(status: str, table: NamedFromClause = jobs) -> ColumnElement[bool]:
    """`status = '<status>'` on `table` with the status inlined, so the partial indexes apply."""
    return table.c.status == literal_column(f"'{states.known(status)}'")


# A predicate on a job's kind column: which kinds a claim takes.
KindIn = Callable[[ColumnElement[str]], ColumnElement[bool]]


def claim_statement(kind_in: KindIn, *, lateral: bool) -> Update:
    """The claim: up to `limit` due pending jobs of the kinds `kind_in` accepts, moved to
    processing, taken in turns across queues (each account's oldest, then each one's second,
    ...; among one turn the oldest first).

    It finds the queues with pending jobs by skipping from one to the next in
    `ix_jobs_pending_queue` and reads at most `limit` jobs at the head of each: its cost grows
    with the batch and the number of queues, never with one queue's backlog. With `lateral`
    (PostgreSQL) it then takes each queue's share of the batch `FOR UPDATE SKIP LOCKED`, so
    concurrent claims take disjoint batches without waiting; without it (SQLite) the claim's
    transaction already excludes every other writer.
    """
    # The batch size as a subquery, not a parameter: PostgreSQL then cannot plan for its value,
    # so every claim runs one generic plan (a custom plan per size costs more to make than to
    # run).
    now, limit = _now(), select(_bind("limit", Integer())).scalar_subquery()
    queues = _queues()

    def head(table: NamedFromClause, queue: ColumnElement[str]) -> Select[Any]:
        """The queue's due pending jobs of the kinds, oldest first."""
        return (
            select(table.c.id)
            .where(
                queue_of(table) == queue,
                status_is(states.PENDING, table),
                table.c.run_at <= now,
                kind_in(table.c.kind),
            )
            .order_by(table.c.run_at, table.c.id)
        )

    if lateral:
        k = jobs.alias("k")
        heads = head(k, queues.c.queue).add_columns(k.c.run_at).limit(limit).lateral("heads")
        turn = func.row_number().over(
            partition_by=queues.c.queue, order_by=(heads.c.run_at, heads.c.id)
        )
        candidates = (
            select(queues.c.queue, heads.c.id, heads.c.run_at, turn.label("turn"))
            .select_from(queues.join(heads, true()))
            .subquery("candidates")
        )
        first = (
            select(candidates.c.queue)
            .order_by(candidates.c.turn, candidates.c.run_at, candidates.c.id)
            .limit(limit)
            .subquery("first")
        )
        shares = (
            select(first.c.queue, func.count().label("share")).group_by(first.c.queue).cte("shares")
        )
        taken = jobs.alias("m")
        share = (
            head(taken, shares.c.queue)
            .with_only_columns(_ctid(taken))
            .limit(shares.c.share)
            .with_for_update(skip_locked=True)
            .lateral("share")
        )
        batch = select(share.c.ctid).select_from(shares.join(share, true()))
    else:
        listed = jobs.alias("j")
        heads_in = head(jobs.alias("k"), queues.c.queue).limit(limit).correlate(queues)
        turn = func.row_number().over(
            partition_by=queues.c.queue, order_by=(listed.c.run_at, listed.c.id)
        )
        candidates = (
            select(listed.c.id, listed.c.run_at, turn.label("turn"))
            .select_from(queues.join(listed, listed.c.id.in_(heads_in)))
            .subquery("candidates")
        )
        batch = (
            select(candidates.c.id)
            .order_by(candidates.c.turn, candidates.c.run_at, candidates.c.id)
            .limit(limit)
        )
    chosen = batch.cte("batch").select()
    # PostgreSQL: the rows it locked, by their physical address (a TID scan), where a lookup
    # by id may read the whole table to hash it. A locked row cannot move before the UPDATE
    # (one changed since the statement began is not visible there: the next claim takes it).
    picked = (
        _ctid(jobs) == any_(func.array(chosen.scalar_subquery()))
        if lateral
        else jobs.c.id.in_(chosen)
    )
    return (
        update(jobs)
        .where(picked)
        .values(
            status=states.transition(states.PENDING, Change.CLAIM),
            attempts=jobs.c.attempts + 1,
            locked_by=_bind("claimer", String()),
            lease_until=_bind("leased_until", UTCDateTime()),
            started_at=func.coalesce(jobs.c.started_at, now),
            updated_at=now,
            version=jobs.c.version + 1,
        )
        .returning(*jobs.c)
    )


def _ctid(table: NamedFromClause) -> ColumnElement[Any]:
    """PostgreSQL's physical address of a row of `table`."""
    return literal_column(f"{table.name}.ctid").label("ctid")


def _queues() -> CTE:
    """The queues with pending jobs, one index probe each: each the next after the last (and a
    last NULL, the end)."""
    first = (
        select(queue_of(jobs))
        .where(status_is(states.PENDING))
        .order_by(queue_of(jobs))
        .limit(1)
        .scalar_subquery()
    )
    queues = select(first.label("queue")).cte("queues", recursive=True)
    later = jobs.alias("n")
    following = (
        select(queue_of(later))
        .where(status_is(states.PENDING, later), queue_of(later) > queues.c.queue)
        .order_by(queue_of(later))
        .limit(1)
        .scalar_subquery()
    )
    return queues.union_all(select(following).where(queues.c.queue.is_not(None)))


def renew_statement(id_in: ColumnElement[bool]) -> Update:
    """The heartbeat: extend the leases a worker still holds on the jobs `id_in` accepts."""
    return (
        update(jobs)
        .where(
            id_in,
            status_is(states.PROCESSING),
            jobs.c.locked_by == _bind("worker_id", String()),
        )
        .values(lease_until=_bind("leased_until", UTCDateTime()))
        .returning(jobs.c.id, jobs.c.cancel_requested)
    )


def progress_statement() -> Update:
    """A progress report, fenced like every write of the job's holder."""
    return (
        update(jobs)
        .where(
            jobs.c.id == _bind("job_id", String()),
            status_is(states.PROCESSING),
            jobs.c.locked_by == _bind("holder", String()),
            jobs.c.attempts == _bind("held_attempts", Integer()),
        )
        .values(
            progress=_bind("percent", Integer()),
            version=jobs.c.version + 1,
            updated_at=_now(),
        )
        .returning(jobs.c.cancel_requested)
    )


# What a plain `done` sets besides its version and timestamps (as `_outcome_values` does).
SETTLED_DONE: dict[str, Any] = {
    "status": states.transition(states.PROCESSING, Change.SUCCEED),
    "locked_by": None,
    "lease_until": None,
    "error": None,
    "progress": 100,
    "has_result": False,
}


def settle_done_statement(*held: ColumnElement[bool]) -> Update:
    """Many held jobs (those `held` matches) to `done` in one UPDATE; it returns only what may
    differ."""
    now = _now()
    return (
        update(jobs)
        .where(status_is(states.PROCESSING), *held)
        .values(**SETTLED_DONE, version=jobs.c.version + 1, updated_at=now, completed_at=now)
        .returning(jobs.c.id, jobs.c.version, jobs.c.cancel_requested)
    )


def _now() -> BindParameter[Any]:
    """The `now` parameter of a hot statement."""
    return _bind("now", UTCDateTime())


def _bind(name: str, type_: Any) -> BindParameter[Any]:
    return bindparam(name, type_=type_)


def _held(job: Job) -> list[ColumnElement[bool]]:
    return [
        jobs.c.id == job.id,
        status_is(states.PROCESSING),
        jobs.c.locked_by == job.locked_by,
        jobs.c.attempts == job.attempts,
    ]


def _owned(job_id: str, account_id: str | None) -> list[ColumnElement[bool]]:
    return [jobs.c.id == job_id, jobs.c.account_id == account_id]


def _outcome_values(status: str, outcome: Outcome, now: datetime) -> dict[str, Any]:
    values: dict[str, Any] = {
        "status": states.transition(status, outcome.change),
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


async def _run_hooks(uow: UnitOfWork, changed: Sequence[Job], hooks: Sequence[FinalHook]) -> None:
    """Run the final hooks of each job that ended; in the trace of the request that enqueued it
    (what a hook emits is delivered in that trace too)."""
    for job in changed:
        if job.status in (states.DONE, states.FAILED) and hooks:
            with tracing.span(
                "ustun.job.final",
                parent=job.traceparent,
                attributes={"ustun.job.id": job.id, "ustun.job.status": job.status},
            ):
                for hook in hooks:
                    await hook(uow, job)


def _settled_done(plain: dict[str, Job], rows: Sequence[Any], now: datetime) -> list[Job]:
    """The held jobs the settle-done statement moved to done, from the few columns it returns."""
    return [
        replace(
            plain[row.id],
            **SETTLED_DONE,
            version=row.version,
            cancel_requested=row.cancel_requested,
            updated_at=now,
            completed_at=now,
        )
        for row in rows
    ]


class SqlJobStore(abc.ABC):
    """The `JobStore` statements common to SQLite and PostgreSQL; an adapter adds its hot ones
    (each a `Statement` of its dialect's form)."""

    def __init__(
        self,
        *,
        claim: Statement,
        renew: Statement,
        progress: Statement,
        settle_done: Statement,
    ) -> None:
        self._claim = claim
        self._renew = renew
        self._progress = progress
        self._settle_done = settle_done

    @abc.abstractmethod
    def _held_params(self, held: Sequence[Job]) -> dict[str, Any]:
        """The parameters of the settle-done statement that name the held jobs."""

    async def _write_new(self, conn: AsyncConnection, new: list[Job], alone: bool) -> None:
        """Write a unit of work's new jobs, its last work before COMMIT; one job in a unit of
        work that wrote nothing else (`alone`: PostgreSQL only) is one autocommit INSERT."""
        await run(plans.insert_jobs(new), conn, begin=not alone or len(new) > 1)

    async def insert(
        self, uow: UnitOfWork, job: Job, *, committed: Callable[[], Awaitable[None]]
    ) -> None:
        """Add `job` to the jobs `uow` writes at commit."""
        new = _new_jobs.get(uow)
        if new is None:
            new = _new_jobs[uow] = []
            # The hook holds the connection, not the unit of work (the weak key).
            uow.at_commit(functools.partial(self._write_new, uow.conn, new))
            uow.after_commit(committed)
        new.append(job)

    async def insert_alone(self, db: Database, job: Job) -> None:
        """One INSERT that commits by itself (PostgreSQL: on an autocommit connection)."""
        await plans.INSERT.alone(db, plans.params(job))

    async def count_pending(self, uow: UnitOfWork, account_id: str | None, *, at_most: int) -> int:
        """Lock the account's queue until `uow` ends (serialising the quota checks of
        concurrent enqueues), then count its pending jobs, with those `uow` enqueued: `at_most`
        at most, so the count never reads more of a backlog."""
        stored = await run(plans.pending_count(account_id, at_most=at_most), uow.conn)
        new = sum(1 for job in _new_jobs.get(uow, ()) if job.account_id == account_id)
        return min(at_most, stored + new)

    async def get(self, db: Database, job_id: str, *, account_id: str | None) -> Job | None:
        """The job `job_id` of `account_id`, or None."""
        async with db.read() as conn:
            return await run(plans.job_of(job_id, account_id=account_id), conn, begin=False)

    async def cancel(self, uow: UnitOfWork, job_id: str, *, account_id: str | None) -> Job | None:
        """Cancel a pending job at once, or ask a processing one to stop (cooperatively).

        Raises `IllegalTransition` (409) when the job has already finished; None if not found.
        """
        now = clock.now()
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
            status = states.transition(job.status, Change.CANCEL)
            values = {"status": status, "completed_at": now}
        changed = await uow.conn.execute(
            update(jobs)
            .where(jobs.c.id == job.id)
            .values(**values, version=jobs.c.version + 1, updated_at=now)
            .returning(*jobs.c)
        )
        return Job.from_row(changed.one())

    async def events_after(self, db: Database, job: Job, version: int) -> list[JobEvent]:
        """The job's events newer than `version`, oldest first, at most 100 (the SSE replay)."""
        async with db.read() as conn:
            return await run(plans.events_after(job, version), conn, begin=False)

    async def result(self, db: Database, job_id: str, *, account_id: str | None) -> Result | None:
        """The stored result of a finished job of `account_id`, if it produced one."""
        async with db.read() as conn:
            return await run(plans.result(job_id, account_id=account_id), conn, begin=False)

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
        query = select(jobs).where(jobs.c.account_id == account_id)
        if status is not None:
            query = query.where(jobs.c.status == status)
        if cursor is not None:
            query = query.where(jobs.c.id < cursor)
        async with db.read() as conn:
            rows = (await conn.execute(query.order_by(jobs.c.id.desc()).limit(limit + 1))).all()
        listed = [Job.from_row(row) for row in rows[:limit]]
        return JobPage(listed, listed[-1].id if len(rows) > limit else None)

    async def jobs_by_id(self, db: Database, job_ids: Iterable[str]) -> list[Job]:
        """The jobs of `job_ids` that exist, `ID_BATCH` ids per statement."""
        return [Job.from_row(row) for row in await _by_id(db, select(jobs), job_ids)]

    async def versions(self, db: Database, job_ids: Iterable[str]) -> dict[str, tuple[str, int]]:
        """{job id: (status, version)} of the jobs of `job_ids` that exist."""
        statement = select(jobs.c.id, jobs.c.status, jobs.c.version)
        return {row.id: (row.status, row.version) for row in await _by_id(db, statement, job_ids)}

    async def events_within(
        self, db: Database, floors: Mapping[str, int], *, window: int
    ) -> list[JobEvent]:
        """Of each job in `floors`, its events after the version given, `window` versions on;
        by job, oldest first."""
        if not floors:
            return []
        statement = (
            select(job_events)
            .where(
                or_(
                    *(
                        and_(
                            job_events.c.job_id == job_id,
                            job_events.c.version > floor,
                            job_events.c.version <= floor + window,
                        )
                        for job_id, floor in floors.items()
                    )
                )
            )
            .order_by(job_events.c.job_id, job_events.c.version)
        )
        async with db.read() as conn:
            return [JobEvent(**row._mapping) for row in await conn.execute(statement)]

    async def backlog(self, db: Database, account_id: str | None = None) -> Backlog:
        """The due pending jobs of one account (read from its own part of the pending jobs'
        index, never another account's backlog), or of all."""
        where = [status_is(states.PENDING), jobs.c.run_at <= clock.now()]
        if account_id is not None:
            where.append(queue_of() == account_id)
        async with db.read() as conn:
            depth, oldest = (
                await conn.execute(select(func.count(), func.min(jobs.c.run_at)).where(*where))
            ).one()
        return Backlog(depth, oldest)

    async def count_by_status(self, db: Database, account_id: str | None = None) -> dict[str, int]:
        """How many jobs of one account, or of all, are in each status (those with any)."""
        query = select(jobs.c.status, func.count()).group_by(jobs.c.status)
        if account_id is not None:
            query = query.where(jobs.c.account_id == account_id)
        async with db.read() as conn:
            return {row[0]: row[1] for row in await conn.execute(query.order_by(jobs.c.status))}

    async def purge(self, uow: UnitOfWork, *, older_than: timedelta) -> int:
        """Delete finished jobs (with their events and results) completed before now -
        older_than, at most `PURGE_BATCH` of them."""
        cutoff = clock.now() - older_than
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

    async def claim(
        self, db: Database, *, worker_id: str, kinds: Sequence[str], limit: int, lease: float
    ) -> list[Job]:
        """Move up to `limit` due pending jobs of `kinds` to processing, leased to `worker_id`."""
        now = clock.now()
        params = {
            "now": now,
            "kinds": list(kinds),
            "limit": limit,
            "claimer": worker_id,
            "leased_until": now + timedelta(seconds=lease),
        }
        rows = await self._claim.alone(db, params)
        return sorted((Job(**row._mapping) for row in rows), key=lambda j: (j.run_at, j.id))

    async def renew(
        self, db: Database, *, worker_id: str, job_ids: Sequence[str], lease: float
    ) -> dict[str, bool]:
        """Extend the leases `worker_id` still holds; return {job id: cancel requested}."""
        params = {
            "job_ids": list(job_ids),
            "worker_id": worker_id,
            "leased_until": clock.now() + timedelta(seconds=lease),
        }
        rows = await self._renew.alone(db, params)
        return {row.id: row.cancel_requested for row in rows}

    async def set_progress(self, db: Database, job: Job, percent: int) -> bool:
        """Record progress; return whether cancellation was requested. Raises `LeaseLost`."""
        params = {
            "job_id": job.id,
            "holder": job.locked_by,
            "held_attempts": job.attempts,
            "percent": percent,
            "now": clock.now(),
        }
        rows = await self._progress.alone(db, params)
        if not rows:
            raise LeaseLost(f"job {job.id} is no longer leased to {job.locked_by}")
        return bool(rows[0].cancel_requested)

    async def finish(
        self, uow: UnitOfWork, job: Job, outcome: Outcome, *, hooks: Sequence[FinalHook] = ()
    ) -> Job:
        """Move a held job to the outcome's status (done, failed, cancelled, or pending to retry).

        The result, the event and the final hooks (the webhook outbox) commit with the state in
        `uow`. Raises `LeaseLost` if the job is no longer ours.
        """
        now = clock.now()
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

    async def settle(
        self,
        db: Database,
        batch: Sequence[tuple[Job, Outcome]],
        *,
        hooks: Sequence[FinalHook] = (),
    ) -> dict[str, Job | None]:
        """Record many outcomes in ONE transaction: one commit for a whole batch of jobs.

        Plain `done` outcomes share one UPDATE (alone, one statement that commits by itself);
        the others go one by one. Returns each job's new row, or None for a job whose lease was
        lost (its outcome is dropped, the rest commit).
        """
        settled: dict[str, Job | None] = {job.id: None for job, _ in batch}
        plain = {job.id: job for job, outcome in batch if outcome == DONE}
        now = clock.now()
        params = {**self._held_params(list(plain.values())), "now": now}
        if len(plain) == len(batch) and not hooks:
            rows = await self._settle_done.alone(db, params)
            settled.update((job.id, job) for job in _settled_done(plain, rows, now))
            return settled
        async with db.unit_of_work() as uow:
            if plain:
                rows = await self._settle_done.rows(uow.conn, params)
                changed = _settled_done(plain, rows, now)
                settled.update((job.id, job) for job in changed)
                await _run_hooks(uow, changed, hooks)
            for job, outcome in batch:
                if outcome != DONE:
                    with contextlib.suppress(LeaseLost):
                        settled[job.id] = await self.finish(uow, job, outcome, hooks=hooks)
        return settled

    async def recover_expired(
        self, uow: UnitOfWork, *, hooks: Sequence[FinalHook] = ()
    ) -> list[Job]:
        """Give back every job whose lease expired (its worker died or stalled).

        It goes back to pending while it has attempts left, to cancelled if that was asked
        for, and to failed (with a problem) once its attempts are used up.
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
                {"status": states.transition(states.PROCESSING, Change.RELEASE), "run_at": now},
            ),
            (
                [jobs.c.cancel_requested],
                {
                    "status": states.transition(states.PROCESSING, Change.CANCEL),
                    "completed_at": now,
                },
            ),
            (
                [~jobs.c.cancel_requested, jobs.c.attempts >= jobs.c.max_attempts],
                {
                    "status": states.transition(states.PROCESSING, Change.FAIL),
                    "completed_at": now,
                    "error": lost,
                },
            ),
        ]
        recovered: list[Job] = []
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


# Jobs per statement of a read by id (an IN list of ids).
ID_BATCH = 500


async def _by_id(db: Database, statement: Select[Any], job_ids: Iterable[str]) -> list[Any]:
    """The rows of `statement` for the jobs `job_ids`, `ID_BATCH` ids per statement."""
    ordered = sorted(set(job_ids))
    rows: list[Any] = []
    if not ordered:
        return rows
    async with db.read() as conn:
        for start in range(0, len(ordered), ID_BATCH):
            chunk = ordered[start : start + ID_BATCH]
            rows.extend((await conn.execute(statement.where(jobs.c.id.in_(chunk)))).all())
    return rows
