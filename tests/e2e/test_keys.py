"""`ustun keys list` and `ustun keys revoke` as a user runs them, against a running server."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Row, insert, select

from dashboard_support import csrf_of
from support import USTUN, Server, wait_for
from ustun import clock
from ustun.service.plumbing.accounts import create_key
from ustun.service.plumbing.admission import KEY_CACHE_SECONDS
from ustun.store import Database
from ustun.store.migrate import upgrade
from ustun.store.tables import api_keys

pytestmark = pytest.mark.e2e
KEY = re.compile(r"ustun_sk_[A-Za-z0-9_-]{43}")


def _ustun(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [USTUN, *args],
        env={**os.environ, "USTUN_DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _rows(listing: str) -> list[dict[str, str]]:
    header, *lines = listing.splitlines()
    return [dict(zip(header.split("\t"), line.split("\t"), strict=True)) for line in lines]


async def _keys(database_url: str, *accounts: str) -> list[str]:
    """Migrate the database and make one key per account (in-process: only the CLI is tested)."""
    db = Database(database_url)
    try:
        await upgrade(db)
        return [await create_key(db, account) for account in accounts]
    finally:
        await db.dispose()


async def _key_rows(database_url: str) -> list[Row[Any]]:
    db = Database(database_url)
    try:
        async with db.read() as conn:
            return list(await conn.execute(select(api_keys).order_by(api_keys.c.id)))
    finally:
        await db.dispose()


def test_list_shows_keys_never_the_key_and_revoke_refuses_them(empty_database_url: str) -> None:
    acme, other = asyncio.run(_keys(empty_database_url, "acme", "other"))

    listed = _ustun(empty_database_url, "keys", "list")
    assert listed.returncode == 0, listed.stderr
    assert acme not in listed.stdout
    assert acme[13:] not in listed.stdout
    rows = _rows(listed.stdout)
    assert [(r["prefix"], r["account"]) for r in rows] == [
        (other[:13], "other"),
        (acme[:13], "acme"),
    ]
    assert all(r["last_used"] == "-" and r["revoked"] == "-" for r in rows)
    only = _rows(_ustun(empty_database_url, "keys", "list", "--account", "acme").stdout)
    assert [r["account"] for r in only] == ["acme"]

    revoked = _ustun(empty_database_url, "keys", "revoke", acme[:13])
    assert revoked.returncode == 0, revoked.stderr
    assert rows[1]["id"] in revoked.stdout
    after = _rows(_ustun(empty_database_url, "keys", "list").stdout)
    assert after[1]["revoked"] != "-"
    assert after[0]["revoked"] == "-"

    unknown = _ustun(empty_database_url, "keys", "revoke", "ustun_sk_zzzz")
    assert unknown.returncode == 1
    assert "no API key" in unknown.stderr


def test_an_ambiguous_prefix_is_refused_an_id_is_not(empty_database_url: str) -> None:
    (key,) = asyncio.run(_keys(empty_database_url, "default"))
    (first,) = asyncio.run(_key_rows(empty_database_url))

    async def twin() -> None:
        db = Database(empty_database_url)
        try:
            async with db.unit_of_work() as uow:
                await uow.conn.execute(
                    insert(api_keys).values(
                        id="key_twin",
                        account_id=first.account_id,
                        key_hash="0" * 64,
                        prefix=key[:13],
                        created_at=clock.now(),
                    )
                )
        finally:
            await db.dispose()

    asyncio.run(twin())
    refused = _ustun(empty_database_url, "keys", "revoke", key[:13])
    assert refused.returncode == 1
    assert "key_twin" in refused.stderr
    assert first.id in refused.stderr
    assert all(row.revoked_at is None for row in asyncio.run(_key_rows(empty_database_url)))

    by_id = _ustun(empty_database_url, "keys", "revoke", first.id)
    assert by_id.returncode == 0, by_id.stderr
    rows = {row.id: row for row in asyncio.run(_key_rows(empty_database_url))}
    assert rows[first.id].revoked_at is not None
    assert rows["key_twin"].revoked_at is None


def test_a_key_revoked_by_the_cli_stops_working_on_a_running_server(
    empty_database_url: str, tmp_path: Path
) -> None:
    server = Server(empty_database_url, tmp_path / "serve.log").start()
    try:
        key = wait_for(lambda: KEY.search(server.output()), what="the first API key").group()
        auth = {"authorization": f"Bearer {key}"}
        base = server.base_url
        assert httpx.get(f"{base}/v1/payments", headers=auth).status_code == 200
        with httpx.Client(base_url=base) as browser:
            csrf = csrf_of(browser.get("/dashboard/login").text)
            browser.post("/dashboard/login", data={"api_key": key, "csrf_token": csrf})
            assert browser.get("/dashboard").status_code == 200

            revoked = _ustun(empty_database_url, "keys", "revoke", key[:13])
            assert revoked.returncode == 0, revoked.stderr
            started = time.monotonic()
            # The session is checked in the database on every page: it ends at once.
            assert browser.get("/dashboard").headers["location"] == "/dashboard/login"
        # The server's key cache may hold the key for KEY_CACHE_SECONDS, no longer.
        wait_for(
            lambda: httpx.get(f"{base}/v1/payments", headers=auth).status_code == 401,
            timeout=KEY_CACHE_SECONDS + 2,
            what="the server to refuse the revoked key",
        )
        assert time.monotonic() - started <= KEY_CACHE_SECONDS + 2
    finally:
        server.stop()


@pytest.mark.parametrize(("trusted", "secure"), [("", False), ("127.0.0.1", True)])
def test_serve_believes_x_forwarded_proto_from_trusted_proxies_only(
    tmp_path: Path, trusted: str, secure: bool
) -> None:
    """uvicorn by itself would believe 127.0.0.1; `ustun serve` believes the setting alone."""
    server = Server(
        f"sqlite:///{tmp_path / 'ustun.db'}", tmp_path / "serve.log", USTUN_TRUSTED_PROXIES=trusted
    ).start()
    try:
        form = httpx.get(
            f"{server.base_url}/dashboard/login", headers={"x-forwarded-proto": "https"}
        )
        cookie = form.headers["set-cookie"].lower()
        assert ("; secure" in cookie) is secure
    finally:
        server.stop()
