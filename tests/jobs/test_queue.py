"""The queue on SQLite and PostgreSQL: enqueue in a unit of work, claim, fence, recover, purge."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from job_kinds import eventually, finish, recover_expired
from ustun import clock, jobs
from ustun.errors import IllegalTransition, LeaseLost
from ustun.jobs.adapters import store_for
from ustun.jobs.store import DONE, Outcome
from ustun.jobs.tables import job_events
from ustun.jobs.tables import jobs as jobs_table
from ustun.store import Database, UnitOfWork


def _kind() -> str:
    """A kind no other test enqueues, so claims here see only this test's jobs."""
    return f"test-{uuid.uuid4().hex[:10]}"


async def test_enqueue_commits_and_rolls_back_with_the_callers_unit_of_work(db: Database) -> None:
    kind = _kind()
    with pytest.raises(RuntimeError):
        async with db.unit_of_work():
            lost = await jobs.enqueue(db, kind)
            raise RuntimeError("the caller's work failed")
    assert await jobs.get(db, lost.id, account_id=None) is None

    async with db.unit_of_work():
        kept = await jobs.enqueue(db, kind, {"n": 1})
    stored = await jobs.get(db, kept.id, account_id=None)
    assert stored is not None
    assert (stored.status, stored.progress, stored.version, stored.payload) == (
        "pending",
        0,
        1,
        {"n": 1},
    )


async def test_enqueue_shares_the_transaction_of_the_callers_other_writes(db: Database) -> None:
    kind = _kind()
    with pytest.raises(RuntimeError):
        async with db.unit_of_work() as uow:
            first = await jobs.enqueue(db, kind)
            await uow.conn.execute(select(func.count()).select_from(jobs_table))
            second = await jobs.enqueue(db, kind)
            raise RuntimeError("the caller's work failed")
    assert await jobs.get(db, first.id, account_id=None) is None
    assert await jobs.get(db, second.id, account_id=None) is None

    async with db.unit_of_work() as uow:
        await uow.conn.execute(select(func.count()).select_from(jobs_table))
        kept = await jobs.enqueue(db, kind, {"when": "now"}, max_attempts=7)
    assert await jobs.get(db, kept.id, account_id=None) == kept


async def test_a_write_hooked_after_the_enqueue_still_commits_or_fails_with_it(
    db: Database,
) -> None:
    # As the idempotency middleware completes its record: a before-commit hook added later.
    kind = _kind()

    async def lease_lost() -> None:
        raise LeaseLost("another request took the key over")

    with pytest.raises(LeaseLost):
        async with db.unit_of_work() as uow:
            lost = await jobs.enqueue(db, kind)
            uow.before_commit(lease_lost)
    assert await jobs.get(db, lost.id, account_id=None) is None

    async def count() -> None:
        await uow.conn.execute(select(func.count()).select_from(jobs_table))

    async with db.unit_of_work() as uow:
        kept = await jobs.enqueue(db, kind)
        uow.before_commit(count)
    assert await jobs.get(db, kept.id, account_id=None) == kept


async def test_new_jobs_are_written_at_commit_all_together(db: Database) -> None:
    kind = _kind()
    async with db.unit_of_work():
        first = await jobs.enqueue(db, kind)
        assert await jobs.get(db, first.id, account_id=None) is None  # not before the commit
        made = [first, await jobs.enqueue(db, kind, {"i": 2})]
    assert [await jobs.get(db, job.id, account_id=None) for job in made] == made


async def test_claim_takes_a_bounded_batch_oldest_first(db: Database) -> None:
    kind = _kind()
    made = [await jobs.enqueue(db, kind, {"i": i}) for i in range(5)]
    claimed = await store_for(db).claim(db, worker_id="wrk_a", kinds=[kind], limit=3, lease=30)
    assert [j.id for j in claimed] == [j.id for j in made[:3]]
    assert {(j.status, j.attempts, j.locked_by, j.version) for j in claimed} == {
        ("processing", 1, "wrk_a", 2)
    }
    rest = await store_for(db).claim(db, worker_id="wrk_b", kinds=[kind], limit=10, lease=30)
    assert [j.id for j in rest] == [j.id for j in made[3:]]
    assert await store_for(db).claim(db, worker_id="wrk_c", kinds=[kind], limit=10, lease=30) == []
    events = await jobs.events_after(db, claimed[0], 0)
    assert [(e.version, e.status) for e in events] == [(1, "pending"), (2, "processing")]


async def test_a_claim_and_a_settle_in_a_unit_of_work_roll_back_with_it(db: Database) -> None:
    kind = _kind()
    job = await jobs.enqueue(db, kind)
    with pytest.raises(RuntimeError):
        async with db.unit_of_work():
            [claimed] = await store_for(db).claim(
                db, worker_id="wrk_a", kinds=[kind], limit=1, lease=30
            )
            settled = await store_for(db).settle(db, [(claimed, DONE)])
            assert settled[job.id] is not None
            raise RuntimeError("roll back")
    again = await jobs.get(db, job.id, account_id=None)
    assert again is not None
    assert (again.status, again.attempts) == ("pending", 0)


async def test_a_job_scheduled_later_is_not_claimed_early(db: Database) -> None:
    kind = _kind()
    await jobs.enqueue(db, kind, run_at=clock.now() + timedelta(hours=1))
    assert await store_for(db).claim(db, worker_id="w", kinds=[kind], limit=5, lease=30) == []


async def test_many_concurrent_claimers_never_take_the_same_job(db: Database) -> None:
    kind = _kind()
    made = {(await jobs.enqueue(db, kind)).id for _ in range(120)}
    taken: list[str] = []

    async def claimer(name: str) -> None:
        while batch := await store_for(db).claim(
            db, worker_id=name, kinds=[kind], limit=7, lease=30
        ):
            taken.extend(j.id for j in batch)

    await asyncio.gather(*(claimer(f"wrk_{i}") for i in range(8)))
    assert sorted(taken) == sorted(made)


async def test_a_stale_worker_cannot_finish_a_job_it_lost(db: Database) -> None:
    kind = _kind()
    job = await jobs.enqueue(db, kind)
    [first] = await store_for(db).claim(db, worker_id="wrk_a", kinds=[kind], limit=1, lease=30)
    await _expire(db, job.id)
    [requeued] = await recover_expired(db)
    assert (requeued.id, requeued.status, requeued.locked_by) == (job.id, "pending", None)
    [second] = await store_for(db).claim(db, worker_id="wrk_b", kinds=[kind], limit=1, lease=30)
    assert second.attempts == 2

    with pytest.raises(LeaseLost):
        await finish(db, first, DONE)
    with pytest.raises(LeaseLost):
        await store_for(db).set_progress(db, first, 50)
    assert await store_for(db).renew(db, worker_id="wrk_a", job_ids=[job.id], lease=30) == {}

    done = await finish(db, second, DONE)
    assert (done.status, done.progress) == ("done", 100)
    statuses = [e.status for e in await jobs.events_after(db, done, 0)]
    assert statuses == ["pending", "processing", "pending", "processing", "done"]


async def test_expired_leases_with_no_attempts_left_fail_with_a_problem(db: Database) -> None:
    kind = _kind()
    job = await jobs.enqueue(db, kind, max_attempts=1)
    await store_for(db).claim(db, worker_id="wrk_a", kinds=[kind], limit=1, lease=30)
    await _expire(db, job.id)
    seen: list[tuple[str, str]] = []

    async def hook(uow: UnitOfWork, final: jobs.Job) -> None:
        seen.append((final.id, final.status))

    [failed] = await recover_expired(db, hooks=[hook])
    assert failed.status == "failed"
    assert failed.error is not None
    assert failed.error["type"].endswith("/problems/job-failed")
    assert seen == [(job.id, "failed")]


async def test_cancel_pending_processing_and_finished(db: Database) -> None:
    kind = _kind()
    pending = await jobs.enqueue(db, kind)
    cancelled = await jobs.cancel(db, pending.id, account_id=None)
    assert cancelled is not None
    assert (cancelled.status, cancelled.version) == ("cancelled", 2)
    assert cancelled.completed_at is not None
    with pytest.raises(IllegalTransition):
        await jobs.cancel(db, pending.id, account_id=None)

    running = await jobs.enqueue(db, kind)
    [held] = await store_for(db).claim(db, worker_id="wrk_a", kinds=[kind], limit=1, lease=30)
    asked = await jobs.cancel(db, running.id, account_id=None)
    assert asked is not None
    assert (asked.status, asked.cancel_requested) == ("processing", True)
    assert await store_for(db).renew(db, worker_id="wrk_a", job_ids=[held.id], lease=30) == {
        held.id: True
    }
    assert await jobs.cancel(db, "job_missing", account_id=None) is None


async def test_purge_removes_only_old_finished_jobs(db: Database) -> None:
    kind = _kind()
    old, recent, waiting = [await jobs.enqueue(db, kind) for _ in range(3)]
    for job in (old, recent):
        await jobs.cancel(db, job.id, account_id=None)
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            update(jobs_table)
            .where(jobs_table.c.id == old.id)
            .values(completed_at=clock.now() - timedelta(days=8))
        )
    await jobs.purge(db, older_than=timedelta(days=7))
    assert await jobs.get(db, old.id, account_id=None) is None
    async with db.read() as conn:
        left = await conn.scalar(
            select(func.count()).select_from(job_events).where(job_events.c.job_id == old.id)
        )
    assert left == 0
    assert await jobs.get(db, recent.id, account_id=None) is not None
    assert await jobs.get(db, waiting.id, account_id=None) is not None


async def _expire(db: Database, job_id: str) -> None:
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            update(jobs_table)
            .where(jobs_table.c.id == job_id)
            .values(lease_until=clock.now() - timedelta(seconds=1))
        )


async def test_settle_commits_a_batch_and_skips_only_the_jobs_it_lost(db: Database) -> None:
    kind = _kind()
    for _ in range(4):
        await jobs.enqueue(db, kind)
    held = await store_for(db).claim(db, worker_id="wrk_a", kinds=[kind], limit=4, lease=30)
    await _expire(db, held[3].id)
    await recover_expired(db)
    await store_for(db).set_progress(db, held[1], 40)
    await jobs.cancel(db, held[1].id, account_id=None)
    outcomes = [
        (held[0], DONE),
        (held[1], DONE),
        (held[2], Outcome("failed", error={"title": "x"})),
        (held[3], DONE),
    ]
    settled = await store_for(db).settle(db, outcomes)
    assert {job_id: j.status if j else None for job_id, j in settled.items()} == {
        held[0].id: "done",
        held[1].id: "done",
        held[2].id: "failed",
        held[3].id: None,
    }
    back = await jobs.get(db, held[3].id, account_id=None)
    assert back is not None
    assert back.status == "pending"
    for job in held[:3]:
        assert settled[job.id] == await jobs.get(db, job.id, account_id=None)


async def test_the_sweeper_loop_purges_until_stopped(db: Database) -> None:
    job = await jobs.enqueue(db, _kind())
    await jobs.cancel(db, job.id, account_id=None)
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            update(jobs_table)
            .where(jobs_table.c.id == job.id)
            .values(completed_at=clock.now() - timedelta(minutes=2))
        )
    stopping = asyncio.Event()
    sweeping = asyncio.create_task(jobs.purge_loop(db, retention=60, interval=0.05)(stopping))

    async def purged() -> bool:
        return await jobs.get(db, job.id, account_id=None) is None

    await eventually(purged, what="the sweeper to purge the old job")
    stopping.set()
    await asyncio.wait_for(sweeping, 5)
