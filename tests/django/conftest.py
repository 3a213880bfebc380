"""The example shop (examples/django_shop) served by gunicorn, as a user runs it, on a fresh
SQLite or PostgreSQL database per test module."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from support import BACKENDS, drop_pg_database, free_port, make_pg_database, wait_for

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django_shop"
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

    def start(self, *args: str, log: str) -> subprocess.Popen[bytes]:
        """A long-running process in the example's folder (a server, a worker), its output
        in `log_dir/<log>`; stopped at the end of the module."""
        out = (self.log_dir / log).open("ab")
        proc = subprocess.Popen(list(args), cwd=EXAMPLE, env=self.env, stdout=out, stderr=out)
        self.servers.append(proc)
        return proc

    def serve(self, *, workers: int = 4, asgi: bool = False) -> Served:
        """gunicorn with `workers` sync workers (WSGI) or uvicorn workers (ASGI); returns once
        it answers."""
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
            "--graceful-timeout",
            "5",
            *extra,
            log=f"gunicorn-{port}.log",
        )
        served = Served(f"http://127.0.0.1:{port}", proc)

        def answering() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"gunicorn exited early:\n{self.logs()}")
            try:
                return httpx.get(f"{served.url}/payments", timeout=1).status_code == 401
            except httpx.HTTPError:
                return False

        wait_for(answering, timeout=30, what="gunicorn to answer")
        return served

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
        return httpx.Client(base_url=self.url, auth=(user, USERS[user]), timeout=30, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module", params=BACKENDS)
def shop(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shop]:
    """The example shop on a fresh, migrated database with users ann and bob."""
    folder = tmp_path_factory.mktemp("shop")
    pg_name = None
    if request.param == "sqlite":
        url = f"sqlite:///{folder / 'shop.sqlite3'}"
    else:
        pg_name, url = make_pg_database()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLE), os.environ.get("PYTHONPATH", "")]),
        "SHOP_DATABASE_URL": url,
        "SHOP_SECRET_KEY": SECRET_KEY,
        "SHOP_ALLOW_PRIVATE": "1",
    }
    shop = Shop(url, env, folder)
    try:
        shop.manage("migrate", "--no-input")
        for user, password in USERS.items():
            shop.manage(
                "shell",
                "-c",
                f"from django.contrib.auth.models import User; "
                f"User.objects.create_user({user!r}, password={password!r})",
            )
        yield shop
    finally:
        shop.stop_all()
        if pg_name is not None:
            drop_pg_database(pg_name)
