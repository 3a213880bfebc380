"""The secret key: generated beside SQLite, required by PostgreSQL, checked against what is
stored at startup, and rotated by `ustun rotate-key`."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from support import API_KEY, USTUN, Server, free_port, migrate_database, run_ustun, wait_for
from ustun.service import create_app
from ustun.service.plumbing.accounts import create_key
from ustun.settings import Settings
from ustun.store import Database
from ustun.store.tables import accounts
from ustun.webhooks.secretbox import key_file

pytestmark = pytest.mark.e2e
HOOK = "https://hooks.example.com/rotation"
OLD_KEY = "the-key-before-rotation-0123456789abcdef"
NEW_KEY = "the-key-after-rotation-fedcba9876543210"


@pytest.fixture
def keyless_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "USTUN_SECRET_KEY"}


def test_postgresql_refuses_to_start_without_a_key(
    own_postgresql_url: str, keyless_env: dict[str, str]
) -> None:
    done = subprocess.run(
        [USTUN, "worker"],
        env={**keyless_env, "USTUN_DATABASE_URL": own_postgresql_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "USTUN_SECRET_KEY is not set" in done.stderr


def test_sqlite_generates_an_owner_only_key_file(
    tmp_path: Path, keyless_env: dict[str, str]
) -> None:
    url = f"sqlite:///{tmp_path / 'ustun.db'}"
    migrate_database(url)
    worker = subprocess.Popen(
        [USTUN, "worker"],
        env={**keyless_env, "USTUN_DATABASE_URL": url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    key_file = tmp_path / "ustun.db.key"
    try:
        wait_for(key_file.exists, what="the generated key file")
    finally:
        worker.terminate()
        worker.wait(20)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert len(key_file.read_text().strip()) >= 32


def _accounts(database_url: str) -> int:
    async def count() -> int:
        db = Database(database_url)
        try:
            async with db.read() as conn:
                return int(await conn.scalar(select(func.count()).select_from(accounts)) or 0)
        finally:
            await db.dispose()

    return asyncio.run(count())


def test_first_start_on_postgresql_without_a_key_creates_nothing(
    own_postgresql_url: str, tmp_path: Path
) -> None:
    refused = run_ustun(
        "serve", "--port", str(free_port()), env={"USTUN_DATABASE_URL": own_postgresql_url}
    )
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("error: USTUN_SECRET_KEY is not set.")
    assert not API_KEY.search(refused.stdout + refused.stderr)
    assert _accounts(own_postgresql_url) == 0

    server = Server(own_postgresql_url, tmp_path / "serve.log").start()
    try:
        wait_for(lambda: API_KEY.search(server.output()), what="the first API key")
    finally:
        server.stop()


async def _create_endpoint(database_url: str, key: str | None) -> tuple[str, dict[str, str]]:
    """Create an endpoint by an idempotent request to an app sealing under `key`.

    Returns its secret and the request's headers, which replay it.
    """
    db = Database(database_url)
    app = create_app(Settings(database_url=database_url, secret_key=key), db=db)
    headers = {
        "authorization": f"Bearer {await create_key(db, 'rotation')}",
        "idempotency-key": str(uuid.uuid4()),
    }
    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as api,
        ):
            made = await api.post("/v1/webhook-endpoints", json={"url": HOOK}, headers=headers)
    finally:
        await db.dispose()
    assert made.status_code == 201, made.text
    return made.json()["secret"], headers


def test_a_changed_key_is_refused_at_startup_until_rotate_key_moves_every_secret(
    own_database_url: str, tmp_path: Path
) -> None:
    # On SQLite the secrets are sealed under the key generated beside the database.
    generated = key_file(own_database_url)
    secret, replay = asyncio.run(_create_endpoint(own_database_url, None if generated else OLD_KEY))
    old_value = generated.read_text().strip() if generated else OLD_KEY
    env = {"USTUN_DATABASE_URL": own_database_url, "USTUN_SECRET_KEY": NEW_KEY}

    for command in (("worker",), ("serve", "--port", str(free_port()))):
        refused = run_ustun(*command, env=env)
        shown = refused.stdout + refused.stderr
        assert refused.returncode == 2, shown
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 2, shown
        assert lines[0] == (
            "error: USTUN_SECRET_KEY does not open the webhook secrets stored in the database: "
            "they were sealed under another key."
        )
        assert "set USTUN_SECRET_KEY_PREVIOUS to the old key" in lines[1]
        assert "run `ustun rotate-key`" in lines[1]
        if generated is not None:
            assert f"(the contents of {generated})" in lines[1]
        assert NEW_KEY not in shown
        assert old_value not in shown

    rotated = run_ustun("rotate-key", env={**env, "USTUN_SECRET_KEY_PREVIOUS": old_value})
    assert rotated.returncode == 0, rotated.stderr
    assert "re-encrypted 1 webhook endpoint(s) and 1 stored response(s)" in rotated.stderr

    # The new key alone now starts, and the stored answer still replays the same secret.
    server = Server(own_database_url, tmp_path / "serve.log", USTUN_SECRET_KEY=NEW_KEY).start()
    try:
        again = httpx.post(
            f"{server.base_url}/v1/webhook-endpoints", json={"url": HOOK}, headers=replay
        )
    finally:
        server.stop()
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["secret"] == secret


def test_rotate_key_refuses_a_previous_key_that_opens_nothing(own_database_url: str) -> None:
    asyncio.run(_create_endpoint(own_database_url, OLD_KEY))
    env = {
        "USTUN_DATABASE_URL": own_database_url,
        "USTUN_SECRET_KEY": NEW_KEY,
        "USTUN_SECRET_KEY_PREVIOUS": "a-key-that-sealed-nothing-0123456789",
    }
    refused = run_ustun("rotate-key", env=env)
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        "error: USTUN_SECRET_KEY (nor USTUN_SECRET_KEY_PREVIOUS) does not open"
    )
    assert NEW_KEY not in refused.stderr
    # Nothing changed: the old key still opens everything.
    env = {"USTUN_DATABASE_URL": own_database_url, "USTUN_SECRET_KEY": NEW_KEY}
    assert (
        run_ustun("rotate-key", env={**env, "USTUN_SECRET_KEY_PREVIOUS": OLD_KEY}).returncode == 0
    )
