"""`flask --app … ustun migrate` and `flask --app … ustun worker`, on the app's database."""

from __future__ import annotations

import click
from flask.cli import AppGroup

from ustun.cli import run_migrate, run_worker
from ustun.defaults import DEFAULT_JOB_CONCURRENCY
from ustun.flask.extension import current

commands = AppGroup("ustun", help="ustun's schema and worker, on this app's database.")


@commands.command("migrate")
def migrate() -> None:
    """Create or bring up to date ustun's tables in the app's database."""
    run_migrate(current().settings())


@commands.command("worker")
@click.option("--concurrency", default=DEFAULT_JOB_CONCURRENCY, show_default=True, type=int)
def worker(concurrency: int) -> None:
    """Run jobs, webhook delivery and sweepers until SIGTERM or SIGINT."""
    run_worker(current().settings(), concurrency)
