"""Helpers for tests that run real `ustun` processes and wait on real conditions."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import asyncpg
import httpx
import psycopg
import pytest
from jsonschema import FormatChecker
from jsonschema.protocols import Validator
from referencing import Registry, Resource
from referencing.jsonschema import Specification
from sqlalchemy.engine import make_url

from ustun.service.plumbing.accounts import account_for_key, create_key
from ustun.store import Database
from ustun.store.dbapi import DbapiConnection
from ustun.store.migrate import upgrade

T = TypeVar("T")
PG_SERVER = os.environ.get("USTUN_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
BACKENDS = ["sqlite", "postgresql"]
# The key `ustun serve` prints once, on its first start with an empty database.
FIRST_KEY = re.compile(r"ustun_sk_[A-Za-z0-9_-]{43}")


class Worker(Protocol):
    def run(self, stopping: asyncio.Event) -> Coroutine[Any, Any, None]: ...


W = TypeVar("W", bound=Worker)


@contextlib.asynccontextmanager
async def in_background(worker: W) -> AsyncIterator[W]:
    """Run `worker.run(stopping)` in this event loop for the body of the `async with`."""
    stopping = asyncio.Event()
    task = asyncio.create_task(worker.run(stopping))
    try:
        yield worker
    finally:
        stopping.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


async def _pg_admin(sql: str) -> None:
    conn = await asyncpg.connect(PG_SERVER.replace("postgresql+asyncpg", "postgresql"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def _migrate(url: str) -> None:
    db = Database(url)
    try:
        await upgrade(db)
    finally:
        await db.dispose()


def make_pg_database() -> tuple[str, str]:
    """Create an empty PostgreSQL database; return its name and URL."""
    name = f"ustun_test_{uuid.uuid4().hex[:12]}"
    try:
        asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    except OSError as exc:  # pragma: no cover - the environment, not the code
        pytest.fail(f"PostgreSQL is not answering at {PG_SERVER} ({exc}); start it (.ci/run does)")
    base = PG_SERVER.rsplit("/", 1)[0]
    return name, f"{base}/{name}"


def drop_pg_database(name: str) -> None:
    """Drop a database made by `make_pg_database`, closing what still holds it."""
    asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def migrate_database(url: str) -> None:
    """Bring the database at `url` to the newest schema."""
    asyncio.run(_migrate(url))


USTUN = str(Path(sys.executable).with_name("ustun"))
# What the first start prints once, and `ustun keys create` alone on stdout.
API_KEY = re.compile(r"ustun_sk_[A-Za-z0-9_-]{43}")


def run_ustun(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`ustun <args>` to its end, in a bare environment plus `env` (and the tree under test)."""
    bare = {"PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    if "PYTHONPATH" in os.environ:
        bare["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.run(
        [USTUN, *args], env={**bare, **env}, capture_output=True, text=True, timeout=60
    )


async def new_account(db: Database, prefix: str = "test") -> str:
    """The id of a new account of its own (made with its first API key)."""
    account = await account_for_key(db, await create_key(db, f"{prefix}-{uuid.uuid4().hex[:12]}"))
    assert account is not None
    return account.id


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(
    condition: Callable[[], T | None], *, timeout: float = 20.0, interval: float = 0.05, what: str
) -> T:
    """Poll `condition` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@contextmanager
def sync_connection(url: str) -> Iterator[DbapiConnection]:
    """A synchronous driver connection to the database at `url`; commits after the block."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        lite = sqlite3.connect(str(parsed.database))
        try:
            yield DbapiConnection(lite, "sqlite")
            lite.commit()
        finally:
            lite.close()
        return
    dsn = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as pg:
        yield DbapiConnection(pg, "postgresql")


class UstunProcess:
    """`ustun <args>` as a subprocess with its own environment, output captured to a file."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        log_path: Path,
        *,
        stdin: bytes | None = None,
        program: Sequence[str] = (USTUN,),
    ) -> None:
        self.program = list(program)
        self.args = args
        self.env = {**os.environ, **env}
        self.log_path = log_path
        self.stdin = stdin
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> UstunProcess:
        log = self.log_path.open("ab")
        piped = None if self.stdin is None else subprocess.PIPE
        self.proc = subprocess.Popen(
            [*self.program, *self.args], env=self.env, stdin=piped, stdout=log, stderr=log
        )
        if self.proc.stdin is not None and self.stdin is not None:
            self.proc.stdin.write(self.stdin)
            self.proc.stdin.close()
        return self

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up."""
        if self.proc is not None and self.alive():
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> int:
        """SIGTERM and wait for a graceful exit; return the exit code."""
        assert self.proc is not None
        if self.alive():
            self.proc.terminate()
        return self.proc.wait(20)


class Server(UstunProcess):
    """`ustun serve` on a free port; `start()` returns once `/healthz` answers.

    `program` runs instead of `ustun` (a test-support script that installs a hook, then serves).
    """

    def __init__(
        self,
        database_url: str,
        log_path: Path,
        *extra: str,
        program: Sequence[str] = (USTUN,),
        **env: str,
    ) -> None:
        self.port = free_port()
        super().__init__(
            ["serve", "--port", str(self.port), *extra],
            {"USTUN_DATABASE_URL": database_url, **env},
            log_path,
            program=program,
        )
        self.base_url = f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        super().start()

        def healthy() -> bool:
            if not self.alive():
                raise AssertionError(f"ustun serve exited early:\n{self.output()}")
            try:
                return httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, timeout=30, what="ustun serve to answer /healthz")
        return self


@dataclass(frozen=True)
class Served:
    """A running `ustun serve` and the API key it printed on first start."""

    base_url: str
    key: str


def schema_validators(
    document: dict[str, Any], spec: Specification[Any], cls: type[Validator]
) -> Callable[[str], Validator]:
    """Validators for the schemas `document` refers to (`#/components/…`), `$ref`s resolved."""
    uri = "urn:document"
    registry: Registry[Any] = Registry().with_resource(
        uri, Resource.from_contents(document, default_specification=spec)
    )

    def make(ref: str) -> Validator:
        return cls({"$ref": f"{uri}{ref}"}, registry=registry, format_checker=FormatChecker())

    return make


def problem_of(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    """The problem+json body of `response`, once its status, media type and slug are checked."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json", response.text
    body: dict[str, Any] = response.json()
    assert body["type"].endswith(f"/problems/{slug}"), body
    assert body["status"] == status
    return body
