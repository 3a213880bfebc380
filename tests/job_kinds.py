"""Job kinds that exist only in tests, in `kinds`; `ustun worker` loads them via
USTUN_JOB_MODULES=job_kinds.

`slow` runs for `seconds`, reporting progress, and appends `start`/`end` lines with its pid
to the file `log` (O_APPEND, one write per line), so a test can see every run of every job.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from support import in_background
from ustun import jobs
from ustun.errors import TransientError
from ustun.jobs.adapters import store_for
from ustun.jobs.store import Outcome
from ustun.service.runtime.job_loops import job_kinds
from ustun.settings import Settings
from ustun.store import Database

T = TypeVar("T")
TICK = 0.05
kinds = jobs.Registry()


def _log(path: str, what: str, ctx: jobs.JobContext) -> None:
    line = f"{what} {ctx.job.id} {os.getpid()} {ctx.attempt} {time.time():.6f}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@kinds.kind("slow")
async def slow(ctx: jobs.JobContext) -> None:
    """Run for `seconds`, checking for cancellation every tick and reporting progress by 10 %."""
    if log := ctx.payload.get("log"):
        _log(log, "start", ctx)
    seconds = float(ctx.payload.get("seconds", 1.0))
    ticks = max(10, int(seconds / TICK))
    for tick in range(1, ticks + 1):
        await asyncio.sleep(seconds / ticks)
        ctx.checkpoint()
        if tick * 10 // ticks > (tick - 1) * 10 // ticks:
            await ctx.progress(tick * 100 // ticks)
    if log:
        _log(log, "end", ctx)


@kinds.kind("noop")
async def noop(ctx: jobs.JobContext) -> None:
    """Nothing at all (the benchmark's job)."""


@kinds.kind("flaky", max_attempts=3)
async def flaky(ctx: jobs.JobContext) -> jobs.Result:
    """Fail transiently until attempt `succeed_on`, then return a small text result."""
    if ctx.attempt < int(ctx.payload.get("succeed_on", 99)):
        raise TransientError(f"attempt {ctx.attempt} failed")
    return jobs.Result(b"ok", "text/plain", "ok.txt")


@kinds.kind("broken")
async def broken(ctx: jobs.JobContext) -> None:
    """Fail with an error that is not worth retrying."""
    raise ValueError("bad input")


async def eventually(
    condition: Callable[[], Awaitable[T | None]], *, within: float = 20.0, what: str
) -> T:
    """Await `condition` until it returns something truthy; fail after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = await condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.05)


def service_kinds() -> jobs.Registry:
    """The service's job kinds with these, as `ustun worker` has them with
    USTUN_JOB_MODULES=job_kinds."""
    return job_kinds(Settings(job_modules="job_kinds"))


def running(db: Database, **options: Any) -> AbstractAsyncContextManager[jobs.Runner]:
    """A job runner working in the background of this test's event loop (by default running
    the service's job kinds, these among them)."""
    options.setdefault("kinds", service_kinds())
    options.setdefault("poll_interval", 0.1)
    options.setdefault("retry_base", 0.05)
    return in_background(jobs.Runner(db, **options))


async def finished(db: Database, job_id: str, account_id: str | None = None) -> jobs.Job:
    """Wait until the job reaches a final state; return it."""

    async def final() -> jobs.Job | None:
        job = await jobs.get(db, job_id, account_id=account_id)
        return job if job is not None and job.status in jobs.FINAL else None

    return await eventually(final, what=f"job {job_id} to finish")


async def recover_expired(db: Database, **options: Any) -> list[jobs.Job]:
    """Give back the jobs whose lease expired, in a unit of work of its own."""
    async with db.unit_of_work() as uow:
        return await store_for(db).recover_expired(uow, **options)


async def finish(db: Database, job: jobs.Job, outcome: Outcome) -> jobs.Job:
    """Record a held job's outcome, in a unit of work of its own."""
    async with db.unit_of_work() as uow:
        return await store_for(db).finish(uow, job, outcome)


async def count_pending(db: Database, account_id: str | None, *, at_most: int) -> int:
    """The account's pending jobs, `at_most` at most, counted in a unit of work of its own."""
    async with db.unit_of_work() as uow:
        return await store_for(db).count_pending(uow, account_id, at_most=at_most)
