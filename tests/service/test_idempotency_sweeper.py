"""The service's worker runs the idempotency sweeper."""

from __future__ import annotations

import asyncio
import uuid

from sqlalchemy import select

from ustun.idempotency import Claimed, SqlRecordStore
from ustun.idempotency.tables import idempotency_records as records
from ustun.service.runtime.worker import Worker
from ustun.settings import Settings
from ustun.store import Database


async def test_the_worker_purges_expired_records(db: Database, settings: Settings) -> None:
    scope = f"worker-{uuid.uuid4().hex}"
    claim = await SqlRecordStore(db).claim(scope, "k", "f", lease=30, ttl=0.001)
    assert isinstance(claim, Claimed)
    await asyncio.sleep(0.01)  # past the TTL

    async def present() -> bool:
        async with db.read() as conn:
            found = await conn.scalar(select(records.c.key).where(records.c.scope == scope))
            return found is not None

    worker = Worker(db, settings)
    await worker.start()
    try:
        for _ in range(500):
            if not await present():
                break
            await asyncio.sleep(0.01)
        assert not await present()
    finally:
        await worker.stop()
