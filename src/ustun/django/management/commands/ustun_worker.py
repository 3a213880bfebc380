"""`manage.py ustun_worker`: jobs, webhook delivery and sweepers for the project's database."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ustun.cli import run_worker
from ustun.defaults import DEFAULT_JOB_CONCURRENCY
from ustun.django.conf import ustun_settings


class Command(BaseCommand):
    help = "Run ustun's jobs, webhook delivery and sweepers until SIGTERM or SIGINT."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--concurrency", type=int, default=DEFAULT_JOB_CONCURRENCY, help="Jobs run at once."
        )

    def handle(self, *args: Any, concurrency: int, **options: Any) -> None:
        run_worker(ustun_settings(), concurrency)
