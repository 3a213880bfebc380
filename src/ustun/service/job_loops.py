"""The jobs pillar's loops on the service `Worker`: the runner and the retention sweeper."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable

from ustun import jobs

# Imported for what they register: the "report" job kind, and the hook that emits
# job.completed / job.failed into the webhook outbox.
from ustun.service import jobs as job_routes  # noqa: F401
from ustun.service import reports  # noqa: F401
from ustun.settings import Settings
from ustun.store import Database

Loop = Callable[[asyncio.Event], Awaitable[None]]


def job_loops(db: Database, settings: Settings, concurrency: int) -> list[Loop]:
    """Import the app's job modules (`USTUN_JOB_MODULES`), then build the job loops."""
    for module in filter(None, (m.strip() for m in settings.job_modules.split(","))):
        importlib.import_module(module)
    runner = jobs.Runner(
        db,
        concurrency=concurrency,
        lease_seconds=settings.job_lease,
        poll_interval=settings.job_poll_interval,
        retry_base=settings.job_retry_base,
    )
    return [runner.run, jobs.purge_loop(db, retention=settings.job_retention)]
