"""The example Django shop (examples/django_shop) as a user runs it: `manage.py` commands, and
gunicorn serving it (tests/django/conftest.py makes one per test module and database)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import httpx

from example_shops import BIN, Processes, Served
from support import free_port, sync_connection, wait_for

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "django_shop"


@dataclass
class Shop(Processes):
    """The example shop's database and environment; `serve()` starts gunicorn on it."""

    database_url: str
    env: dict[str, str]
    log_dir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    cwd: ClassVar[Path] = EXAMPLE

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`python manage.py <args>` in the example, on this database."""
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=EXAMPLE,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=check,
        )

    def serve(self, *, workers: int = 4, asgi: bool = False, **env: str) -> Served:
        """gunicorn with `workers` sync workers (WSGI) or uvicorn workers (ASGI), `env` added
        to its environment; returns once it answers."""
        port = free_port()
        app = "django_shop.asgi:application" if asgi else "django_shop.wsgi:application"
        extra = ["-k", "uvicorn.workers.UvicornWorker"] if asgi else []
        proc = self.start(
            str(BIN / "gunicorn"),
            app,
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(workers),
            # The app imported once, before the workers fork: four imports of Django, DRF and
            # ustun at once take a loaded two-core machine most of a minute.
            "--preload",
            "--graceful-timeout",
            "5",
            *extra,
            log=f"gunicorn-{port}.log",
            **env,
        )
        served = Served(f"http://127.0.0.1:{port}", proc, timeout=90)

        def answering() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"gunicorn exited early:\n{self.logs()}")
            try:
                return httpx.get(f"{served.url}/payments", timeout=1).status_code == 401
            except httpx.HTTPError:
                return False

        wait_for(answering, timeout=90, what="gunicorn to answer")
        return served

    def scalar(self, sql: str) -> object:
        """The one value `sql` reads from the shop's database (no parameters)."""
        with sync_connection(self.database_url) as conn, conn.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchone()[0]
