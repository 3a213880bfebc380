"""The jobs pillar's loops on the service `Worker`: the runner and the retention sweeper."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable

from ustun import jobs
from ustun.http.errors import ConfigError

# Imported for what they register: the "report" job kind, and the hook that emits
# job.completed / job.failed into the webhook outbox.
from ustun.service import jobs as job_routes  # noqa: F401
from ustun.service import reports  # noqa: F401
from ustun.settings import Settings
from ustun.store import Database

Loop = Callable[[asyncio.Event], Awaitable[None]]


def import_job_modules(settings: Settings) -> None:
    """Import the app's job modules (`USTUN_JOB_MODULES`), which register its job kinds."""
    for module in filter(None, (m.strip() for m in settings.job_modules.split(","))):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (module + ".").startswith(exc.name + "."):
                raise  # the module is there; something it imports is not
            raise ConfigError(
                f"USTUN_JOB_MODULES names {module!r}, which is not importable: install it, or "
                "fix USTUN_JOB_MODULES (and PYTHONPATH)"
            ) from None


def job_loops(db: Database, settings: Settings, concurrency: int) -> list[Loop]:
    """Import the app's job modules, then build the job loops."""
    import_job_modules(settings)
    runner = jobs.Runner(
        db,
        concurrency=concurrency,
        lease_seconds=settings.job_lease,
        poll_interval=settings.job_poll_interval,
        retry_base=settings.job_retry_base,
    )
    return [runner.run, jobs.purge_loop(db, retention=settings.job_retention)]
