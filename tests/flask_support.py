"""The example Flask shop (examples/flask_shop) as a user runs it: `flask --app shop …`
commands, and gunicorn serving it (tests/flask/conftest.py makes one per test module and
database)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx

from example_shops import BIN, Processes, Served
from support import free_port, sync_connection, wait_for

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "flask_shop"


@dataclass
class Shop(Processes):
    """The example shop's database (`database_url` as ustun names it) and environment."""

    database_url: str
    env: dict[str, str]
    log_dir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    cwd: ClassVar[Path] = EXAMPLE

    def flask(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`flask --app shop <args>` in the example's folder, on this database."""
        return subprocess.run(
            [str(BIN / "flask"), "--app", "shop", *args],
            cwd=EXAMPLE,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )

    def serve(
        self, *, workers: int, threads: int = 1, app: str = "shop:app", folder: Path = EXAMPLE
    ) -> Served:
        """gunicorn serving `app` (the shop, by default) from `folder` with `workers` processes
        of `threads` threads; returns once it answers."""
        port = free_port()
        proc = self.start(
            str(BIN / "gunicorn"),
            "--chdir",
            str(folder),
            app,
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(workers),
            "--threads",
            str(threads),
            "--graceful-timeout",
            "2",
            log=f"gunicorn-{port}.log",
        )
        served = Served(f"http://127.0.0.1:{port}", proc, timeout=30)
        self.wait_listening(proc, f"127.0.0.1:{port}", self.log_dir / f"gunicorn-{port}.log")
        return served

    def wait_listening(self, proc: subprocess.Popen[bytes], address: str, log: Path) -> None:
        """Until the gunicorn `proc` logs that it listens at `address` (not some other process
        that took the port meanwhile) and answers there."""

        def answering() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"gunicorn exited early:\n{self.logs()}")
            if f"Listening at: http://{address} ({proc.pid})" not in log.read_text():
                return False
            try:
                return httpx.get(f"http://{address}/", timeout=1).status_code == 404
            except httpx.HTTPError:
                return False

        wait_for(answering, timeout=30, what=f"gunicorn to answer at {address}")


def rows(shop: Shop, sql: str, *params: object) -> list[tuple[Any, ...]]:
    """The rows of `sql` (`?` its parameters) in the shop's database, read on a connection of
    the test's own."""
    with sync_connection(shop.database_url) as conn, conn.cursor() as cursor:
        style = "?" if shop.database_url.startswith("sqlite") else "%s"
        cursor.execute(sql.replace("?", style), params)
        return list(cursor.fetchall())


def payment_events(shop: Shop, amount: int) -> list[str]:
    """The ids of the `payment.created` events of payments of `amount`."""
    found = rows(shop, "SELECT id, data FROM webhook_events WHERE type = 'payment.created'")
    return [id for id, data in found if _json(data)["amount"] == amount]


def _json(data: str | dict[str, Any]) -> dict[str, Any]:
    """A JSON column as the driver gives it: text (sqlite3) or parsed (psycopg)."""
    return data if isinstance(data, dict) else json.loads(data)
