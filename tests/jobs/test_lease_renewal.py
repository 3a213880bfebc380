"""A job's CPU-heavy step runs in the runner's worker process while its lease is renewed; a run
whose lease is lost, or cannot be renewed before it ends, is abandoned at once (its process
killed) and never writes its result. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select, update

from job_kinds import eventually, finished, recover_expired, running
from offload_steps import gone, spin, steps
from ustun import clock, jobs
from ustun.jobs.tables import jobs as jobs_table
from ustun.store import Database

LEASE = 1.0
kinds = jobs.Registry()


@kinds.kind("crunch")
async def crunch(ctx: jobs.JobContext) -> jobs.Result:
    """Offload `spin` for `seconds[attempt - 1]` and store what it returns."""
    seconds = ctx.payload["seconds"][ctx.attempt - 1]
    out = await ctx.offload(spin, ctx.payload["log"], ctx.job.id, ctx.attempt, seconds)
    return jobs.Result(out, "text/plain", "out.txt")


async def _started(log: Path, attempt: int) -> int:
    """The pid of the process running `attempt`, once it has started."""

    async def pid() -> int | None:
        return next((p for what, p, a in steps(log) if (what, a) == ("start", attempt)), None)

    return await eventually(pid, within=30, what=f"attempt {attempt} to start its step")


async def _ended(pid: int, *, within: float) -> float:
    """Wait until process `pid` has ended; how long that took."""
    began = time.monotonic()

    async def ended() -> bool:
        return gone(pid)

    await eventually(ended, within=within, what=f"process {pid} to end")
    return time.monotonic() - began


async def test_a_step_longer_than_the_lease_runs_once_and_leaves_the_loop_free(
    db: Database, tmp_path: Path
) -> None:
    log = tmp_path / "steps.log"
    job = await jobs.enqueue(db, "crunch", {"seconds": [4 * LEASE], "log": str(log)}, kinds=kinds)
    lags: list[float] = []

    async def sample() -> None:
        """How late the event loop wakes a 10 ms sleep, while the job runs."""
        while True:
            asked = time.monotonic()
            await asyncio.sleep(0.01)
            lags.append(time.monotonic() - asked - 0.01)

    async with running(db, kinds=kinds, lease_seconds=LEASE):
        sampler = asyncio.create_task(sample())
        try:
            done = await finished(db, job.id)
        finally:
            sampler.cancel()
    # The step outlived its lease four times over: renewed, it ran once, in another process.
    assert (done.status, done.attempts) == ("done", 1)
    assert await jobs.result(db, job.id, account_id=None) == jobs.Result(
        b"attempt 1", "text/plain", "out.txt"
    )
    assert [(what, attempt) for what, _, attempt in steps(log)] == [("start", 1), ("end", 1)]
    events = await jobs.events_after(db, done, 0)
    assert [e.status for e in events if e.type == "status"] == ["pending", "processing", "done"]
    assert max(lags) < LEASE / 2, f"the event loop stalled for {max(lags):.3f} s"


async def test_a_run_that_lost_its_lease_is_killed_and_writes_nothing(
    db: Database, tmp_path: Path
) -> None:
    log = tmp_path / "steps.log"
    payload = {"seconds": [120, 0.2], "log": str(log)}
    job = await jobs.enqueue(db, "crunch", payload, kinds=kinds)
    async with running(db, kinds=kinds, lease_seconds=LEASE):
        first = await _started(log, 1)

        async def given_back() -> bool:
            """As if this worker had stalled past its lease: another one gives the job back
            (tried again if the heartbeat renewed the lease in between)."""
            async with db.unit_of_work() as uow:
                await uow.conn.execute(
                    update(jobs_table)
                    .where(jobs_table.c.id == job.id)
                    .values(lease_until=clock.now() - timedelta(seconds=1))
                )
            return job.id in {j.id for j in await recover_expired(db)}

        await eventually(given_back, what="the job to be given back")
        # Killed within a heartbeat or two, not after its 120 s.
        await _ended(first, within=10 * LEASE)
        done = await finished(db, job.id)
    assert (done.status, done.attempts) == ("done", 2)
    assert await jobs.result(db, job.id, account_id=None) == jobs.Result(
        b"attempt 2", "text/plain", "out.txt"
    )
    assert [(what, attempt) for what, _, attempt in steps(log)] == [
        ("start", 1),
        ("start", 2),
        ("end", 2),
    ]


async def test_a_run_whose_lease_cannot_be_renewed_is_abandoned_when_it_ends(
    db: Database, database_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "steps.log"
    payload = {"seconds": [120, 0.2], "log": str(log)}
    job = await jobs.enqueue(db, "crunch", payload, kinds=kinds)
    other = Database(database_url)
    try:
        async with running(db, kinds=kinds, lease_seconds=LEASE):
            first = await _started(log, 1)
            # Another session holds the job's row (on SQLite, the write lock): renewals wait.
            async with other.unit_of_work() as uow:
                await uow.conn.execute(
                    select(jobs_table.c.id).where(jobs_table.c.id == job.id).with_for_update()
                )
                took = await _ended(first, within=10 * LEASE)
            assert took <= 2 * LEASE
            done = await finished(db, job.id)
    finally:
        await other.dispose()
    assert (done.status, done.attempts) == ("done", 2)
    assert await jobs.result(db, job.id, account_id=None) == jobs.Result(
        b"attempt 2", "text/plain", "out.txt"
    )
    assert [(what, attempt) for what, _, attempt in steps(log)] == [
        ("start", 1),
        ("start", 2),
        ("end", 2),
    ]
