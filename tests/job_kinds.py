"""Job kinds that exist only in tests; `ustun worker` loads them via USTUN_JOB_MODULES=job_kinds.

`slow` runs for `seconds`, reporting progress, and appends `start`/`end` lines with its pid
to the file `log` (O_APPEND, one write per line), so a test can see every run of every job.
"""

from __future__ import annotations

import asyncio
import os
import time

from ustun import jobs
from ustun.errors import TransientError


def _log(path: str, what: str, ctx: jobs.JobContext) -> None:
    line = f"{what} {ctx.job.id} {os.getpid()} {ctx.attempt} {time.time():.6f}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@jobs.job_kind("slow")
async def slow(ctx: jobs.JobContext) -> None:
    """Sleep `seconds` in ten steps, reporting progress after each."""
    if log := ctx.payload.get("log"):
        _log(log, "start", ctx)
    steps = 10
    for step in range(1, steps + 1):
        await asyncio.sleep(float(ctx.payload.get("seconds", 1.0)) / steps)
        await ctx.progress(step * 100 // steps)
    if log:
        _log(log, "end", ctx)


@jobs.job_kind("noop")
async def noop(ctx: jobs.JobContext) -> None:
    """Nothing at all (the benchmark's job)."""


@jobs.job_kind("flaky", max_attempts=3)
async def flaky(ctx: jobs.JobContext) -> jobs.Result:
    """Fail transiently until attempt `succeed_on`, then return a small text result."""
    if ctx.attempt < int(ctx.payload.get("succeed_on", 99)):
        raise TransientError(f"attempt {ctx.attempt} failed")
    return jobs.Result(b"ok", "text/plain", "ok.txt")


@jobs.job_kind("broken")
async def broken(ctx: jobs.JobContext) -> None:
    """Fail with an error that is not worth retrying."""
    raise ValueError("bad input")
