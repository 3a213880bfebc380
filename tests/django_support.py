"""The example Django shop (examples/django_shop) as a user runs it: `manage.py` commands, and
gunicorn serving it (tests/django/conftest.py makes one per test module and database)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from support import free_port, sync_connection, wait_for

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "django_shop"
BIN = Path(sys.executable).parent
SECRET_KEY = "test-shop-secret-key-of-at-least-32-characters"
USERS = {"ann": "ann-password", "bob": "bob-password"}


@dataclass
class Shop:
    """The example shop's database and environment; `serve()` starts gunicorn on it."""

    database_url: str
    env: dict[str, str]
    log_dir: Path
    servers: list[subprocess.Popen[bytes]] = field(default_factory=list)

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

    def start(self, *args: str, log: str, **env: str) -> subprocess.Popen[bytes]:
        """A long-running process in the example's folder (a server, a worker), `env` added
        to its environment, its output in `log_dir/<log>`; stopped at the end of the module."""
        out = (self.log_dir / log).open("ab")
        proc = subprocess.Popen(
            list(args),
            cwd=EXAMPLE,
            env={**self.env, **env},
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
        self.servers.append(proc)
        return proc

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
        served = Served(f"http://127.0.0.1:{port}", proc)

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

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL to `proc` and every process it started (gunicorn's workers): no cleanup."""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.log_dir.glob("*.log"))

    def stop_all(self) -> None:
        for proc in self.servers:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.servers:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@dataclass(frozen=True)
class Served:
    url: str
    process: subprocess.Popen[bytes]

    def client(self, user: str = "ann", **kwargs: object) -> httpx.Client:
        """An HTTP client signed in as `user` (basic auth)."""
        return httpx.Client(base_url=self.url, auth=(user, USERS[user]), timeout=90, **kwargs)  # type: ignore[arg-type]


def race(
    client: Callable[[], httpx.Client], n: int, path: str, key: str, amount: int
) -> list[httpx.Response]:
    """`n` POSTs of one payment under one key, sent together, each on its own connection."""
    start = threading.Barrier(n)

    def post(_: int) -> httpx.Response:
        with client() as http:
            start.wait()
            return http.post(
                path, json={"amount": amount, "currency": "EUR"}, headers={"Idempotency-Key": key}
            )

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(post, range(n)))


def executed_once(answers: list[httpx.Response]) -> httpx.Response:
    """The one answer that ran the view; every other is its replay or a 409 in progress."""
    statuses = sorted(a.status_code for a in answers)
    assert set(statuses) <= {201, 409}, statuses
    fresh = [a for a in answers if a.status_code == 201 and "idempotent-replayed" not in a.headers]
    assert len(fresh) == 1, statuses
    for answer in answers:
        if answer.status_code == 409:
            assert answer.json()["type"] == "/problems/idempotency-in-progress"
            assert "retry-after" in answer.headers
        else:
            assert answer.content == fresh[0].content
    return fresh[0]
