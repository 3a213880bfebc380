"""Asynchronous work: a durable job queue on SQLite or PostgreSQL.

    from ustun.jobs import Registry, enqueue

    kinds = Registry()

    @kinds.kind("thumbnail")
    async def thumbnail(ctx):            # ctx: JobContext
        await ctx.progress(50)           # 0-100; raises JobCancelled if cancelled
        return Result(png, "image/png", "thumb.png")

    async with db.unit_of_work():        # the job commits with the caller's writes
        job = await enqueue(db, "thumbnail", {"doc": doc_id}, account_id=account.id, kinds=kinds)

`Runner(db, kinds=kinds).run(stopping)` claims and runs jobs of the kinds in a `Registry`.
Storage goes through the port in `ustun.jobs.store`, with one adapter per database in
`ustun.jobs.adapters`; what an enqueue writes is a plan (`ustun.jobs.adapters.plans`) that
runs on any connection.
"""

from ustun.jobs.context import JobContext
from ustun.jobs.queue import cancel, enqueue, events_after, get, new_job, page, purge, result
from ustun.jobs.records import Backlog, Job, JobEvent, JobPage, Result
from ustun.jobs.registry import JobKind, Registry
from ustun.jobs.runner import Runner
from ustun.jobs.states import (
    CANCELLED,
    DONE,
    FAILED,
    FINAL,
    PENDING,
    PROCESSING,
    STATUSES,
    Change,
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
    "Backlog",
    "Change",
    "FinalHook",
    "Job",
    "JobContext",
    "JobEvent",
    "JobKind",
    "JobPage",
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
    "new_job",
    "page",
    "purge",
    "purge_loop",
    "result",
]
