"""What only the SQL store does: purging expired records, and the sweeper loop."""

from __future__ import annotations

import asyncio
import uuid

from sqlalchemy import select

from ustun.idempotency import Claimed, SqlRecordStore, StoredResponse, sweeper
from ustun.idempotency.tables import idempotency_records as records
from ustun.store import Database


async def test_purge_deletes_only_expired_records(db: Database) -> None:
    store = SqlRecordStore(db)
    await store.purge_expired()
    old = await store.claim("purge", "old", "f", lease=30, ttl=0.001)
    live = await store.claim("purge", "live", "f", lease=30, ttl=60)
    assert isinstance(old, Claimed)
    assert isinstance(live, Claimed)
    await store.complete("purge", "old", old.lease_token, StoredResponse(200, (), b""), ttl=0.001)
    await asyncio.sleep(0.01)
    assert await store.purge_expired() == 1
    assert await store.purge_expired() == 0
    await store.release("purge", "live", live.lease_token)


async def test_sweeper_loop_purges_until_stopped(db: Database) -> None:
    store = SqlRecordStore(db)
    scope = f"sweep-{uuid.uuid4().hex}"
    expired = await store.claim(scope, "k", "f", lease=30, ttl=0.001)
    assert isinstance(expired, Claimed)
    await asyncio.sleep(0.01)

    async def present() -> bool:
        async with db.read() as conn:
            found = await conn.scalar(
                select(records.c.key).where(records.c.scope == scope, records.c.key == "k")
            )
            return found is not None

    assert await present()
    stopping = asyncio.Event()
    task = asyncio.create_task(sweeper(store, interval=0.01)(stopping))
    for _ in range(1000):
        if not await present():
            break
        await asyncio.sleep(0.01)
    assert not await present()
    stopping.set()
    async with asyncio.timeout(10):
        await task
