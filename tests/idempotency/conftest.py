"""Record stores on every backend: SQLite, PostgreSQL and Redis (127.0.0.1:6379)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest

from ustun.idempotency import RecordStore, RedisRecordStore, SqlRecordStore
from ustun.store import Database

REDIS_URL = os.environ.get("USTUN_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _redis_store() -> RedisRecordStore:
    return RedisRecordStore.from_url(REDIS_URL, prefix=f"ustun-test:{uuid.uuid4().hex}:")


async def _forget(store: RedisRecordStore) -> None:
    keys = [k async for k in store.redis.scan_iter(match=f"{store.prefix}*")]
    if keys:
        await store.redis.delete(*keys)
    await store.close()


@pytest.fixture
async def redis_store() -> AsyncIterator[RedisRecordStore]:
    """A Redis store under a prefix of its own, deleted afterwards."""
    store = _redis_store()
    yield store
    await _forget(store)


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Where the store under test keeps its records."""
    if request.param == "redis":
        return REDIS_URL
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
async def record_store(store_url: str) -> AsyncIterator[RecordStore]:
    """The same contract on every store."""
    if store_url.startswith("redis"):
        store = _redis_store()
        yield store
        await _forget(store)
        return
    db = Database(store_url)
    yield SqlRecordStore(db)
    await db.dispose()


@pytest.fixture
def scope() -> str:
    """A scope nobody else uses, so tests never see each other's keys."""
    return f"acct_{uuid.uuid4().hex[:16]}"
