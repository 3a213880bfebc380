"""A Litestar app with `UstunPlugin` (tests/litestar/apps/litestar_shop.py) served by uvicorn
with two worker processes, on a fresh SQLite or PostgreSQL database of ustun's schema."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support import (
    BACKENDS,
    drop_pg_database,
    free_port,
    make_pg_database,
    migrate_database,
    wait_for,
)

APPS = Path(__file__).parent / "apps"
UVICORN = Path(sys.executable).with_name("uvicorn")


@pytest.fixture(scope="module", params=BACKENDS)
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A fresh database with ustun's tables and the app's."""
    pg_name = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('litestar') / 'shop.sqlite3'}"
    else:
        pg_name, url = make_pg_database()
    try:
        migrate_database(url)
        env = {**os.environ, "LITESTAR_DATABASE_URL": url}
        subprocess.run(
            [sys.executable, "litestar_shop.py"], cwd=APPS, env=env, check=True, timeout=60
        )
        yield url
    finally:
        if pg_name is not None:
            drop_pg_database(pg_name)


@pytest.fixture(scope="module")
def served(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """uvicorn serving the app with 2 workers; its base URL once it answers."""
    port = free_port()
    log = (tmp_path_factory.mktemp("uvicorn") / "uvicorn.log").open("ab")
    proc = subprocess.Popen(
        [str(UVICORN), "litestar_shop:app", "--port", str(port), "--workers", "2"],
        cwd=APPS,
        env={**os.environ, "LITESTAR_DATABASE_URL": database_url},
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"

    def answering() -> bool:
        output = Path(log.name).read_text()
        if proc.poll() is not None:
            raise AssertionError(f"uvicorn exited early: {output}")
        # Its own line: not some other process that took the port meanwhile.
        if f"Uvicorn running on {url}" not in output:
            return False
        try:
            return httpx.get(f"{url}/payments/0", timeout=1).status_code == 404
        except httpx.HTTPError:
            return False

    try:
        wait_for(answering, timeout=30, what="uvicorn to answer")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
