"""Asynchronous work: a durable job queue on SQLite or PostgreSQL.

    from ustun.jobs import job_kind, enqueue

    @job_kind("thumbnail")
    async def thumbnail(ctx):            # ctx: JobContext
        await ctx.progress(50)           # 0-100; raises JobCancelled if cancelled
        return Result(png, "image/png", "thumb.png")

    async with db.unit_of_work():        # the job commits with the caller's writes
        job = await enqueue(db, "thumbnail", {"doc": doc_id}, account_id=account.id)

`Runner(db).run(stopping)` claims and runs jobs of the kinds in a `Registry` (by default the
one `@job_kind` fills; the service `Worker` passes its own). Storage goes through the port in
`ustun.jobs.store`, with one adapter per database in `ustun.jobs.adapters`.
"""

from ustun.jobs.context import JobContext
from ustun.jobs.queue import cancel, enqueue, events_after, get, purge, result
from ustun.jobs.records import Job, JobEvent, Result
from ustun.jobs.registry import JobKind, Registry, job_kind, registry
from ustun.jobs.runner import Runner
from ustun.jobs.states import (
    CANCELLED,
    DONE,
    FAILED,
    FINAL,
    PENDING,
    PROCESSING,
    STATUSES,
    JobStatus,
    JobStatusValue,
)
from ustun.jobs.store import FinalHook, JobStore
from ustun.jobs.sweeper import purge_loop

__all__ = [
    "CANCELLED",
    "DONE",
    "FAILED",
    "FINAL",
    "PENDING",
    "PROCESSING",
    "STATUSES",
    "FinalHook",
    "Job",
    "JobContext",
    "JobEvent",
    "JobKind",
    "JobStatus",
    "JobStatusValue",
    "JobStore",
    "Registry",
    "Result",
    "Runner",
    "cancel",
    "enqueue",
    "events_after",
    "get",
    "job_kind",
    "purge",
    "purge_loop",
    "registry",
    "result",
]
