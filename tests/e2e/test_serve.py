"""`ustun serve`, `ustun migrate` and `ustun keys create` as a user runs them."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from support import API_KEY, USTUN, Server, run_ustun, wait_for

pytestmark = pytest.mark.e2e


# A SQLite file that is not there is a mistake in USTUN_DATABASE_URL (2), as a PostgreSQL
# database that does not exist is; one that is there but not migrated is refused (1).
_REFUSED = {"sqlite": 2, "postgresql": 1}


def _ustun(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"USTUN_DATABASE_URL": database_url, "USTUN_SECRET_KEY": os.environ["USTUN_SECRET_KEY"]}
    return run_ustun(*args, env=env)


def test_first_start_serves_and_prints_one_key(empty_database_url: str, tmp_path: Path) -> None:
    server = Server(empty_database_url, tmp_path / "serve.log").start()
    try:
        key = wait_for(lambda: API_KEY.search(server.output()), what="the first API key").group()
        base = server.base_url
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.get(f"{base}/readyz").json() == {"status": "ready"}

        denied = httpx.get(f"{base}/v1/payments")
        assert denied.status_code == 401
        assert denied.headers["content-type"] == "application/problem+json"
        assert denied.json()["type"].endswith("/problems/unauthorized")

        auth = {"authorization": f"Bearer {key}"}
        listed = httpx.get(f"{base}/v1/payments", headers=auth)
        assert listed.status_code == 200
        assert listed.json() == {"data": [], "next_cursor": None}

        missing = httpx.get(f"{base}/no/such/path", headers=auth)
        assert missing.status_code == 404
        assert missing.json()["type"].endswith("/problems/not-found")
        assert httpx.get(denied.json()["type"]).status_code == 200
    finally:
        # uvicorn re-raises the signal once shut down, as a supervisor expects.
        assert server.stop() in (0, -signal.SIGTERM), server.output()
    assert "Application shutdown complete" in server.output()

    again = Server(empty_database_url, tmp_path / "serve2.log").start()
    try:
        assert httpx.get(f"{again.base_url}/v1/payments", headers=auth).status_code == 200
    finally:
        again.stop()
    assert not API_KEY.search(again.output()), "a second start must not print a new key"


def test_keys_create_prints_only_the_key(empty_database_url: str) -> None:
    assert _ustun(empty_database_url, "migrate").returncode == 0
    made = _ustun(empty_database_url, "keys", "create", "--account", "acme")
    assert made.returncode == 0, made.stderr
    assert API_KEY.fullmatch(made.stdout.strip())
    assert made.stdout.count("\n") == 1


def test_no_migrate_refuses_an_old_schema(empty_database_url: str) -> None:
    refused = _ustun(empty_database_url, "serve", "--no-migrate", "--port", "1")
    assert refused.returncode == _REFUSED[empty_database_url.split(":")[0]]
    assert "run `ustun migrate`" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_keys_create_on_an_unmigrated_database_says_what_to_do(empty_database_url: str) -> None:
    refused = _ustun(empty_database_url, "keys", "create")
    assert refused.returncode == _REFUSED[empty_database_url.split(":")[0]]
    assert refused.stdout == ""
    assert "ustun migrate" in refused.stderr


def test_every_command_has_help() -> None:
    for args in (
        ["--help"],
        ["serve", "--help"],
        ["worker", "--help"],
        ["migrate", "--help"],
        ["keys", "create", "--help"],
        ["keys", "list", "--help"],
        ["keys", "revoke", "--help"],
    ):
        shown = subprocess.run([USTUN, *args], capture_output=True, text=True, timeout=30)
        assert shown.returncode == 0, args
        assert "Usage" in shown.stdout
