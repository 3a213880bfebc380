"""The jobs pillar on the service: its job kinds, and its loops on the `Worker` (the runner and
the retention sweeper)."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable

from ustun import jobs
from ustun.errors import ConfigError
from ustun.service.operations import job_routes
from ustun.service.resources import reports
from ustun.settings import Settings
from ustun.store import Database

Loop = Callable[[asyncio.Event], Awaitable[None]]


# The attribute of a job module that holds its kinds.
KINDS = "kinds"


def import_job_modules(settings: Settings) -> jobs.Registry:
    """The job kinds of the app's job modules (`USTUN_JOB_MODULES`): each holds its own
    `Registry` as `kinds`."""
    found = jobs.Registry()
    for module in filter(None, (m.strip() for m in settings.job_modules.split(","))):
        try:
            imported = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (module + ".").startswith(exc.name + "."):
                raise  # the module is there; something it imports is not
            raise ConfigError(
                f"USTUN_JOB_MODULES names {module!r}, which is not importable: install it, or "
                "fix USTUN_JOB_MODULES (and PYTHONPATH)"
            ) from None
        kinds = getattr(imported, KINDS, None)
        if not isinstance(kinds, jobs.Registry):
            raise ConfigError(
                f"USTUN_JOB_MODULES names {module!r}, which has no job kinds: it needs a "
                f"`{KINDS} = ustun.jobs.Registry()` that its job kinds are registered in"
            )
        found.include(kinds)
    return found


def job_kinds(settings: Settings) -> jobs.Registry:
    """The service's job kinds: the app's (those of its job modules), the report, and the hook
    that emits job.completed / job.failed into the webhook outbox."""
    kinds = import_job_modules(settings)
    if kinds.get(reports.KIND) is None:  # an app's own kind of that name wins
        reports.register(kinds)
    job_routes.register(kinds)
    return kinds


def job_loops(
    db: Database, settings: Settings, concurrency: int, kinds: jobs.Registry
) -> list[Loop]:
    """The job loops, running the kinds in `kinds`."""
    runner = jobs.Runner(
        db,
        kinds=kinds,
        concurrency=concurrency,
        lease_seconds=settings.job_lease,
        poll_interval=settings.job_poll_interval,
        retry_base=settings.job_retry_base,
    )
    return [runner.run, jobs.purge_loop(db, retention=settings.job_retention)]
