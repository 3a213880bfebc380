"""The runner on SQLite and PostgreSQL: outcomes, retries with backoff, cancellation, hooks."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from job_kinds import eventually, finished, kinds, recover_expired, running
from ustun import clock, jobs
from ustun.errors import TransientError
from ustun.jobs import runner
from ustun.jobs.runner import retry_delay
from ustun.jobs.tables import jobs as jobs_table
from ustun.store import Database, UnitOfWork


async def test_a_job_runs_to_done_with_increasing_progress(db: Database) -> None:
    job = await jobs.enqueue(db, "slow", {"seconds": 0.3})
    async with running(db):
        done = await finished(db, job.id)
    assert (done.status, done.progress, done.attempts) == ("done", 100, 1)
    assert done.started_at is not None
    assert done.completed_at is not None
    events = await jobs.events_after(db, done, 0)
    assert [e.version for e in events] == list(range(1, done.version + 1))
    progress = [e.progress for e in events]
    assert progress == sorted(progress)
    assert events[-1].status == "done"


async def test_transient_errors_are_retried_then_the_result_is_stored(db: Database) -> None:
    job = await jobs.enqueue(db, "flaky", {"succeed_on": 2}, kinds=kinds)
    async with running(db):
        done = await finished(db, job.id)
    assert (done.status, done.attempts, done.error, done.has_result) == ("done", 2, None, True)
    stored = await jobs.result(db, job.id, account_id=None)
    assert stored == jobs.Result(b"ok", "text/plain", "ok.txt")


async def test_retries_stop_at_the_maximum_with_a_problem(db: Database) -> None:
    job = await jobs.enqueue(db, "flaky", kinds=kinds)
    async with running(db):
        failed = await finished(db, job.id)
    assert (failed.status, failed.attempts, failed.max_attempts) == ("failed", 3, 3)
    assert failed.error is not None
    assert failed.error["type"].endswith("/problems/job-failed")
    assert failed.error["status"] == 500
    assert "TransientError" in failed.error["detail"]


async def test_an_error_that_is_not_transient_fails_at_once(db: Database) -> None:
    job = await jobs.enqueue(db, "broken")
    async with running(db):
        failed = await finished(db, job.id)
    assert (failed.status, failed.attempts) == ("failed", 1)


async def test_cancel_while_processing_stops_the_job(db: Database) -> None:
    job = await jobs.enqueue(db, "slow", {"seconds": 5})
    async with running(db, lease_seconds=1.5):

        async def started() -> bool:
            current = await jobs.get(db, job.id, account_id=None)
            return current is not None and current.progress > 0

        await eventually(started, what="the job to report progress")
        await jobs.cancel(db, job.id, account_id=None)
        cancelled = await finished(db, job.id)
    assert cancelled.status == "cancelled"
    assert cancelled.progress < 100


async def test_final_hooks_see_done_and_failed_in_the_same_transaction(db: Database) -> None:
    kinds = jobs.Registry()
    seen: list[tuple[str, str, bool]] = []

    @kinds.kind("hooked-ok")
    async def ok(ctx: jobs.JobContext) -> None:
        return None

    @kinds.kind("hooked-bad")
    async def bad(ctx: jobs.JobContext) -> None:
        raise TransientError("never works")

    async def hook(uow: UnitOfWork, job: jobs.Job) -> None:
        in_transaction = uow.conn.in_transaction()
        seen.append((job.id, job.status, in_transaction))

    kinds.on_final(hook)
    good = await jobs.enqueue(db, "hooked-ok", kinds=kinds)
    failing = await jobs.enqueue(db, "hooked-bad", max_attempts=1, kinds=kinds)
    async with running(db, kinds=kinds):
        await finished(db, good.id)
        await finished(db, failing.id)
    assert sorted(seen) == sorted([(good.id, "done", True), (failing.id, "failed", True)])


async def test_a_job_frees_its_slot_while_it_settles(db: Database) -> None:
    """The next claim overlaps a settle; at most `concurrency` more jobs wait to settle."""
    if db.is_sqlite:
        pytest.skip("SQLite serialises writers: a claim waits for the settle's transaction")
    kinds = jobs.Registry()
    started: list[str] = []
    gate = asyncio.Event()

    @kinds.kind("step")
    async def step(ctx: jobs.JobContext) -> None:
        started.append(ctx.job.id)

    async def stuck(uow: UnitOfWork, job: jobs.Job) -> None:
        await gate.wait()

    kinds.on_final(stuck)
    made = [(await jobs.enqueue(db, "step", kinds=kinds)).id for _ in range(3)]

    async def second_started() -> bool:
        return len(started) >= 2

    async with running(db, kinds=kinds, concurrency=1):
        try:
            # The first job's settle hangs in its hook: the second runs all the same, and the
            # third waits, as both slots for settling jobs are taken.
            await eventually(second_started, what="the second job to run")
            assert started == made[:2]
        finally:
            gate.set()
        for job_id in made:
            await finished(db, job_id)
    assert started == made


def test_only_the_final_hooks_that_act_on_a_batch_are_run_for_it() -> None:
    kinds = jobs.Registry()

    async def everything(uow: UnitOfWork, job: jobs.Job) -> None:
        return None

    async def accounts_only(uow: UnitOfWork, job: jobs.Job) -> None:
        return None

    kinds.on_final(accounts_only, acts_on=lambda job: job.account_id is not None)
    stamp = clock.now()
    own = _job(stamp, account_id=None)
    assert kinds.final_hooks_for([own]) == []
    assert kinds.final_hooks_for([own, _job(stamp, account_id="acc_1")]) == [accounts_only]
    kinds.on_final(everything)
    assert kinds.final_hooks_for([own]) == [everything]


def _job(now: datetime, *, account_id: str | None) -> jobs.Job:
    return jobs.Job(
        id=f"job_{uuid.uuid4().hex}",
        account_id=account_id,
        kind="noop",
        status="processing",
        payload={},
        progress=0,
        attempts=1,
        max_attempts=3,
        run_at=now,
        locked_by="wrk_1",
        lease_until=now,
        cancel_requested=False,
        error=None,
        has_result=False,
        version=2,
        created_at=now,
        updated_at=now,
        started_at=now,
        completed_at=None,
    )


async def test_a_backlog_drains_in_full_batches_without_waiting_to_gather(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only a claim that empties the queue waits for more enqueues to gather.
    monkeypatch.setattr(runner, "CLAIM_GATHER", 60.0)
    kinds = jobs.Registry()
    kind = f"backlog-{uuid.uuid4().hex[:10]}"

    @kinds.kind(kind)
    async def quick(ctx: jobs.JobContext) -> None:
        return None

    made = [await jobs.enqueue(db, kind, kinds=kinds) for _ in range(10)]
    async with running(db, kinds=kinds, concurrency=3):
        for job in made:
            assert (await finished(db, job.id)).status == "done"


@pytest.mark.parametrize("attempt", [1, 2, 5, 40])
def test_retry_delay_grows_exponentially_with_jitter_and_a_cap(attempt: int) -> None:
    expected = min(3_600.0, 2.0 * 2 ** (attempt - 1))
    for _ in range(50):
        delay = retry_delay(attempt, 2.0)
        assert expected * 0.8 <= delay <= expected * 1.2


async def test_a_worker_that_lost_its_lease_stops_and_never_records_an_outcome(
    db: Database, tmp_path: Path
) -> None:
    runs = tmp_path / "runs.log"
    job = await jobs.enqueue(db, "slow", {"seconds": 1.5, "log": str(runs)})
    async with running(db, lease_seconds=0.6):

        async def started() -> bool:
            current = await jobs.get(db, job.id, account_id=None)
            return current is not None and current.progress > 0

        await eventually(started, what="the first run to make progress")

        async def given_back() -> bool:
            """As if the worker had stalled past its lease: another worker gives the job back.
            Tried again if the worker's heartbeat renewed the lease in between (a busy box)."""
            async with db.unit_of_work() as uow:
                await uow.conn.execute(
                    update(jobs_table)
                    .where(jobs_table.c.id == job.id)
                    .values(lease_until=clock.now() - timedelta(seconds=1))
                )
            return job.id in {j.id for j in await recover_expired(db)}

        await eventually(given_back, what="the stalled run's job to be given back")
        done = await finished(db, job.id)
    assert (done.status, done.attempts) == ("done", 2)
    lines = [line.split()[:4] for line in runs.read_text().splitlines()]
    assert [(what, attempt) for what, _, _, attempt in lines] == [
        ("start", "1"),
        ("start", "2"),
        ("end", "2"),
    ]
