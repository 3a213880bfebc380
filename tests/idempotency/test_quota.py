"""Each scope's quota of bytes of stored answers (issue 27), on SQLite, PostgreSQL and Redis.

40 s of 1 MiB documents with distinct keys grew the SQLite file to 3.46 GB. Now a scope whose
stored answers hold `max_bytes` is refused new keys (429 `quota-exceeded`, nothing runs) until
enough of them expire, while its keys already used still replay exactly.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import Response
from sqlalchemy import func, select

from ustun.defaults import DEFAULT_IDEMPOTENCY_SWEEP_INTERVAL
from ustun.idempotency import (
    Claimed,
    Found,
    IdempotencyMiddleware,
    OverQuota,
    RecordStore,
    RedisRecordStore,
    SqlRecordStore,
    State,
    StoredResponse,
)
from ustun.idempotency.tables import idempotency_records as records
from ustun.idempotency.tables import idempotency_usage as usage
from ustun.store import Database

REDIS_URL = os.environ.get("USTUN_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
LIMIT = 1000
ANSWER = StoredResponse(201, (("content-type", "text/plain"),), b"x" * 560)
SIZE = len(ANSWER.headers_json()) + 560  # 600 bytes: two answers pass the limit
TTL = 60.0


async def _quota_store(url: str, max_bytes: int | None = LIMIT) -> RecordStore:
    if url.startswith("redis"):
        prefix = f"ustun-test:{uuid.uuid4().hex}:"
        return RedisRecordStore.from_url(url, prefix=prefix, max_bytes=max_bytes)
    return SqlRecordStore(Database(url), max_bytes=max_bytes)


async def _close(store: RecordStore) -> None:
    if isinstance(store, RedisRecordStore):
        keys = [k async for k in store.redis.scan_iter(match=f"{store.prefix}*")]
        if keys:
            await store.redis.delete(*keys)
        await store.close()
    elif isinstance(store, SqlRecordStore):
        await store.db.dispose()


@pytest.fixture
async def quota_store(store_url: str) -> AsyncIterator[RecordStore]:
    """A store of `store_url`'s kind with a quota of 1,000 bytes per scope."""
    store = await _quota_store(store_url)
    yield store
    await _close(store)


async def _store(store: RecordStore, scope: str, key: str, *, ttl: float = TTL) -> None:
    claim = await store.claim(scope, key, "f", lease=30, ttl=ttl)
    assert isinstance(claim, Claimed), claim
    assert await store.complete(scope, key, claim.lease_token, ANSWER, ttl=ttl)


async def test_a_scope_at_its_quota_is_refused_new_keys_and_still_replays_its_own(
    quota_store: RecordStore, scope: str
) -> None:
    await _store(quota_store, scope, "k1")
    await _store(quota_store, scope, "k2")  # 1,200 bytes now: past the limit by this one
    refused = await quota_store.claim(scope, "k3", "f", lease=30, ttl=TTL)
    assert isinstance(refused, OverQuota)
    assert refused.limit == LIMIT
    # Until its oldest answer expires (SQL: and the sweeper has run after it).
    assert TTL - 10 <= refused.retry_after <= TTL + DEFAULT_IDEMPOTENCY_SWEEP_INTERVAL
    again = await quota_store.claim(scope, "k1", "f", lease=30, ttl=TTL)
    assert isinstance(again, Found)
    assert again.record.state is State.COMPLETED
    assert again.record.response == ANSWER
    assert isinstance(
        await quota_store.claim(scope + "-other", "k3", "f", lease=30, ttl=TTL), Claimed
    )


async def test_answers_that_expire_give_the_quota_back(
    quota_store: RecordStore, scope: str
) -> None:
    await _store(quota_store, scope, "short", ttl=0.05)
    await _store(quota_store, scope, "long")  # 1,200 bytes, 600 of them kept for a minute
    await asyncio.sleep(0.1)  # past the short TTL: a fact about the clock, not a race
    if isinstance(quota_store, SqlRecordStore):
        assert isinstance(await quota_store.claim(scope, "k", "f", lease=30, ttl=TTL), OverQuota)
        await quota_store.purge_expired()  # Redis takes what expired off at the claim itself
    assert isinstance(await quota_store.claim(scope, "k", "f", lease=30, ttl=TTL), Claimed)


async def test_a_dead_claim_is_not_taken_over_past_the_quota(
    quota_store: RecordStore, scope: str
) -> None:
    """Taking a crashed request's key over runs it anew: a new execution, refused likewise."""
    dead = await quota_store.claim(scope, "dead", "f", lease=0, ttl=TTL)
    assert isinstance(dead, Claimed)
    await _store(quota_store, scope, "k1")
    await _store(quota_store, scope, "k2")
    assert isinstance(await quota_store.claim(scope, "dead", "f", lease=30, ttl=TTL), OverQuota)


async def test_without_a_quota_nothing_is_refused(store_url: str, scope: str) -> None:
    store = await _quota_store(store_url, max_bytes=None)
    try:
        for n in range(3):
            await _store(store, scope, f"k{n}")
    finally:
        await _close(store)


async def _used(db: Database, scope: str) -> int:
    async with db.read() as conn:
        used = await conn.scalar(
            select(func.coalesce(func.sum(usage.c.bytes), 0)).where(usage.c.scope == scope)
        )
    return int(used or 0)


async def _stored(db: Database, scope: str) -> int:
    """The bytes of the scope's stored answers, counted from the records themselves."""
    async with db.read() as conn:
        rows = await conn.execute(
            select(records.c.headers, records.c.body).where(records.c.scope == scope)
        )
        return sum(len(headers or "") + len(body or b"") for headers, body in rows)


async def test_every_write_of_a_record_keeps_its_scopes_bytes(db: Database, scope: str) -> None:
    store = SqlRecordStore(db)

    async def check() -> None:
        assert await _used(db, scope) == await _stored(db, scope)

    claim = await store.claim(scope, "a", "f", lease=30, ttl=TTL)
    assert isinstance(claim, Claimed)
    await check()
    assert await store.complete(scope, "a", claim.lease_token, ANSWER, ttl=TTL)
    assert await _used(db, scope) == SIZE
    assert await store.settle(scope, "b", "f", StoredResponse(200, (), b"12345"), ttl=TTL) is None
    assert await _used(db, scope) == SIZE + len("[]") + 5
    await store.settle(scope, "gone", "f", ANSWER, ttl=0.001)
    short = await store.claim(scope, "short", "f", lease=30, ttl=0.001)
    assert isinstance(short, Claimed)
    await store.complete(scope, "short", short.lease_token, ANSWER, ttl=0.001)
    await check()
    await asyncio.sleep(0.01)  # past the TTL
    taken = await store.claim(scope, "short", "f", lease=30, ttl=TTL)  # takes the row over
    assert isinstance(taken, Claimed)
    await check()
    await store.release(scope, "short", taken.lease_token)
    await check()
    assert await store.purge_expired() >= 1
    await check()
    assert await _used(db, scope) == SIZE + len("[]") + 5


def _app(store: RecordStore, scope: str, **options: Any) -> tuple[FastAPI, Counter[str]]:
    runs: Counter[str] = Counter()
    app = FastAPI()

    @app.post("/answers")
    async def answer() -> Response:
        runs["answers"] += 1
        return Response(b"x" * 560, status_code=201, media_type="text/plain")

    app.add_middleware(IdempotencyMiddleware, store=store, scope_of=lambda _: scope, **options)
    return app, runs


MODES = {
    "settle-at-commit": {"transactional": True},
    "claim-first": {"transactional": True, "claim_first": True},
    "plain": {},
}


@pytest.mark.parametrize(
    ("backend", "mode"),
    [(b, m) for b in ("sqlite", "postgresql") for m in MODES] + [("redis", "plain")],
)
async def test_past_the_quota_a_new_key_is_429_and_runs_nothing(
    request: pytest.FixtureRequest, backend: str, mode: str
) -> None:
    """In each mode the middleware keeps its records in (a Redis store has only plain)."""
    url = REDIS_URL if backend == "redis" else request.getfixturevalue(f"{backend}_url")
    store = await _quota_store(url)
    app, runs = _app(store, uuid.uuid4().hex, **MODES[mode])
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            first = await http.post("/answers", headers={"idempotency-key": "k1"})
            await http.post("/answers", headers={"idempotency-key": "k2"})
            refused = await http.post("/answers", headers={"idempotency-key": "k3"})
            replay = await http.post("/answers", headers={"idempotency-key": "k1"})
            keyless = await http.post("/answers")
    finally:
        await _close(store)
    assert first.status_code == 201
    assert refused.status_code == 429
    assert refused.headers["content-type"] == "application/problem+json"
    problem = refused.json()
    assert problem["type"] == "/problems/quota-exceeded"
    assert problem["limit"] == LIMIT
    assert "Nothing was applied" in problem["detail"]
    assert 1 <= int(refused.headers["retry-after"]) <= 86_400 + DEFAULT_IDEMPOTENCY_SWEEP_INTERVAL
    assert replay.status_code == 201
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.content == first.content
    assert keyless.status_code == 201  # nothing is stored for it, so nothing is refused
    assert runs["answers"] == 3
