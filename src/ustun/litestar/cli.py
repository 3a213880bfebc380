"""`litestar --app … ustun migrate` and `litestar --app … ustun worker`, on the database of the
app's `UstunPlugin` (its settings: secret key, job modules, …)."""

from __future__ import annotations

import click
from litestar import Litestar
from litestar.cli._utils import LitestarGroup

from ustun.cli import run_migrate, run_worker
from ustun.defaults import DEFAULT_JOB_CONCURRENCY
from ustun.settings import Settings


def _settings(app: Litestar) -> Settings:
    """The settings of the app's `UstunPlugin`."""
    from ustun.litestar.plugin import UstunPlugin  # it registers these commands

    return app.plugins.get(UstunPlugin).settings


@click.group(cls=LitestarGroup, name="ustun")
def commands() -> None:
    """ustun's schema and worker, on this app's database."""


@commands.command("migrate")  # type: ignore[untyped-decorator]
def migrate(app: Litestar) -> None:
    """Create or bring up to date ustun's tables in the app's database."""
    run_migrate(_settings(app))


@commands.command("worker")  # type: ignore[untyped-decorator]
@click.option("--concurrency", default=DEFAULT_JOB_CONCURRENCY, show_default=True, type=int)
def worker(app: Litestar, concurrency: int) -> None:
    """Run jobs, webhook delivery and sweepers until SIGTERM or SIGINT."""
    run_worker(_settings(app), concurrency)
