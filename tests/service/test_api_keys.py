"""`/v1/api-keys`: list, create, revoke an account's own keys; revocation ends sessions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import event, select, update

from dashboard_support import log_in
from ustun import clock
from ustun.service import create_app
from ustun.service.plumbing.accounts import (
    LAST_USED_GRANULARITY,
    authenticate,
    list_keys,
    revoke_key,
)
from ustun.service.plumbing.admission import KEY_CACHE_SECONDS
from ustun.settings import Settings
from ustun.store import Database, metadata
from ustun.store.tables import api_keys
from webhook_support import until


def _auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture
async def second_process(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    """Another app on the same database, with its own key cache: a second `ustun serve`."""
    app = create_app(settings, db=db)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://testserver"
        ) as http,
    ):
        yield http


async def test_create_shows_the_key_once_and_never_stores_it(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    made = await client.post("/v1/api-keys", headers={"idempotency-key": "k1"})
    assert made.status_code == 201, made.text
    assert made.headers["cache-control"] == "no-store"
    body = made.json()
    new_key = body["key"]
    assert new_key.startswith("ustun_sk_")
    assert body["prefix"] == new_key[:13]
    assert body["id"].startswith("key_")
    assert body["revoked_at"] is None

    assert (await client.get("/v1/payments", headers=_auth(new_key))).status_code == 200
    listed = (await client.get("/v1/api-keys")).json()
    assert next(k["id"] for k in listed["data"]) == body["id"]
    assert len(listed["data"]) == 2
    assert new_key not in str(listed)
    assert api_key not in str(listed)
    replayed = await client.post("/v1/api-keys", headers={"idempotency-key": "k1"})
    assert replayed.headers["idempotent-replayed"] == "true"
    assert replayed.json() == body
    # Never stored in clear: the stored answer to replay is sealed (it is `no-store`).
    async with db.read() as conn:
        dump = "\n".join(
            [
                str(row)
                for table in metadata.sorted_tables
                for row in await conn.execute(select(table))
            ]
        )
    assert new_key.removeprefix("ustun_sk_")[4:] not in dump


async def test_list_shows_only_the_accounts_own_keys(
    client: httpx.AsyncClient, other_client: httpx.AsyncClient
) -> None:
    mine = (await client.get("/v1/api-keys")).json()["data"]
    theirs = (await other_client.get("/v1/api-keys")).json()["data"]
    assert len(mine) == len(theirs) == 1
    assert mine[0]["id"] != theirs[0]["id"]
    assert set(mine[0]) == {"id", "object", "prefix", "created_at", "last_used_at", "revoked_at"}
    assert mine[0]["last_used_at"] is not None  # the request itself used it


async def test_an_account_cannot_revoke_another_accounts_key(
    client: httpx.AsyncClient, other_client: httpx.AsyncClient
) -> None:
    theirs = (await other_client.get("/v1/api-keys")).json()["data"][0]["id"]
    refused = await client.delete(f"/v1/api-keys/{theirs}")
    assert refused.status_code == 404
    assert refused.json()["type"].endswith("/problems/not-found")
    assert (await other_client.get("/v1/payments")).status_code == 200
    assert (await client.delete("/v1/api-keys/key_nope")).status_code == 404


async def test_a_revoked_key_is_refused_at_once_in_this_process(
    client: httpx.AsyncClient, api_key: str
) -> None:
    spare = (await client.post("/v1/api-keys")).json()
    assert (await client.get("/v1/payments", headers=_auth(spare["key"]))).status_code == 200

    assert (await client.delete(f"/v1/api-keys/{spare['id']}")).status_code == 204
    refused = await client.get("/v1/payments", headers=_auth(spare["key"]))
    assert refused.status_code == 401
    assert refused.json()["type"].endswith("/problems/unauthorized")
    listed = (await client.get("/v1/api-keys")).json()["data"]
    assert next(k for k in listed if k["id"] == spare["id"])["revoked_at"] is not None
    # Revoking again changes nothing; the key that did it still works.
    assert (await client.delete(f"/v1/api-keys/{spare['id']}")).status_code == 204
    assert (await client.get("/v1/payments")).status_code == 200


async def test_a_key_revoked_elsewhere_stops_within_the_cache_bound(
    client: httpx.AsyncClient, second_process: httpx.AsyncClient
) -> None:
    spare = (await client.post("/v1/api-keys")).json()
    auth = _auth(spare["key"])
    assert (await second_process.get("/v1/payments", headers=auth)).status_code == 200
    revoked_at = time.monotonic()
    assert (await client.delete(f"/v1/api-keys/{spare['id']}")).status_code == 204

    async def refused() -> bool:
        return (await second_process.get("/v1/payments", headers=auth)).status_code == 401

    await until(refused, within=KEY_CACHE_SECONDS + 2, what="the other process to refuse")
    assert time.monotonic() - revoked_at <= KEY_CACHE_SECONDS + 2


async def test_revoking_a_key_ends_the_dashboard_sessions_opened_with_it(
    browser: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    spare = (await client.post("/v1/api-keys")).json()
    await log_in(browser, spare["key"])
    assert (await browser.get("/dashboard")).status_code == 200

    assert (await client.delete(f"/v1/api-keys/{spare['id']}")).status_code == 204
    page = await browser.get("/dashboard")
    assert page.status_code == 303
    assert page.headers["location"] == "/dashboard/login"
    polled = await browser.get("/dashboard/deliveries", headers={"hx-request": "true"})
    assert polled.headers["hx-redirect"] == "/dashboard/login"


@pytest.fixture
async def browser(client: httpx.AsyncClient) -> AsyncIterator[httpx.AsyncClient]:
    """A cookie-keeping client, not logged in, on the same app as `client`."""
    async with httpx.AsyncClient(transport=client._transport, base_url=client.base_url) as http:
        yield http


async def test_last_used_is_written_at_most_once_a_minute(db: Database, api_key: str) -> None:
    before = clock.now()
    credential = await authenticate(db, api_key)
    assert credential is not None

    async def last_used() -> datetime | None:
        keys = await list_keys(db, credential.account.name)
        return next(k.last_used_at for k in keys if k.id == credential.key_id)

    first = await last_used()
    assert first is not None
    assert first >= before - timedelta(seconds=1)
    for _ in range(5):
        await authenticate(db, api_key)
    assert await last_used() == first

    # Once the value is older than the granularity, the next use writes it again.
    stale = first - LAST_USED_GRANULARITY - timedelta(seconds=1)
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            update(api_keys).where(api_keys.c.id == credential.key_id).values(last_used_at=stale)
        )
    await authenticate(db, api_key)
    renewed = await last_used()
    assert renewed is not None
    assert renewed >= first


async def test_revoke_is_scoped_to_the_account(db: Database, api_key: str) -> None:
    credential = await authenticate(db, api_key)
    assert credential is not None
    assert await revoke_key(db, credential.key_id, "acct_someone_else") is None
    assert await authenticate(db, api_key) is not None
    revoked = await revoke_key(db, credential.key_id, credential.account.id)
    assert revoked is not None
    assert revoked.revoked_at is not None
    assert await authenticate(db, api_key) is None


async def test_concurrent_uses_of_a_stale_key_write_last_used_once(
    db: Database, api_key: str
) -> None:
    credential = await authenticate(db, api_key)
    assert credential is not None
    stale = clock.now() - 2 * LAST_USED_GRANULARITY
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            update(api_keys).where(api_keys.c.id == credential.key_id).values(last_used_at=stale)
        )
    written: list[int] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE API_KEYS") and cursor.rowcount > 0:
            written.append(cursor.rowcount)

    event.listen(db.engine.sync_engine, "after_cursor_execute", count)
    try:
        results = await asyncio.gather(*(authenticate(db, api_key) for _ in range(20)))
    finally:
        event.remove(db.engine.sync_engine, "after_cursor_execute", count)
    assert all(r == credential for r in results)
    assert written == [1]
