"""Claims on both backends: disjoint between workers, capped per endpoint, with their event."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from sqlalchemy import select

from ustun import clock
from ustun.store import Database
from ustun.webhooks.adapters import for_database
from ustun.webhooks.outbox import emit
from ustun.webhooks.store import CLAIM_ROUNDS, Claim
from ustun.webhooks.tables import endpoints
from webhook_support import MakeEndpoint

URL = "http://127.0.0.1:9/hook"
LEASE = timedelta(seconds=60)


async def _queue(db: Database, account_id: str, n: int) -> list[str]:
    async with db.unit_of_work() as uow:
        return [await emit(uow, account_id, "payment.created", {"id": f"p{i}"}) for i in range(n)]


async def _claim(
    db: Database, account_id: str, token: str, saturated: tuple[str, ...] = ()
) -> list[Claim]:
    """A claim that leaves alone every other test's endpoints (by calling them saturated)."""
    async with db.read() as conn:
        others = await conn.scalars(
            select(endpoints.c.id).where(endpoints.c.account_id != account_id)
        )
        skipped = [*others, *saturated]
    now = clock.now()
    return await for_database(db).claim(
        db, limit=20, now=now, lease_until=now + LEASE, token=token, saturated=skipped
    )


async def test_concurrent_claims_take_disjoint_rows_capped_per_endpoint(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    await make_endpoint(URL, max_in_flight=4)
    await _queue(db, account_id, 30)
    a, b = await asyncio.gather(
        _claim(db, account_id, "lease_a"), _claim(db, account_id, "lease_b")
    )
    c = await _claim(db, account_id, "lease_c")
    taken = [{item.id for item in batch} for batch in (a, b, c)]
    assert all(len(ids) <= 4 * CLAIM_ROUNDS for ids in taken)
    assert len(taken[0] | taken[1] | taken[2]) == sum(len(ids) for ids in taken) > 4 * CLAIM_ROUNDS


async def test_a_claim_brings_the_event_and_holds_the_delivery_for_the_lease(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    endpoint_id, _ = await make_endpoint(URL)
    async with db.unit_of_work() as uow:
        event_id = await emit(
            uow, account_id, "payment.created", {"id": "pay_1", "amount": 5}, object_url="/p/1"
        )
    (got,) = await _claim(db, account_id, "lease_a")
    assert (got.endpoint_id, got.event_id, got.attempt_count, got.status) == (
        endpoint_id,
        event_id,
        0,
        "pending",
    )
    assert (got.event_type, json.loads(got.event_data), got.object_url) == (
        "payment.created",
        {"id": "pay_1", "amount": 5},
        "/p/1",
    )
    assert got.event_created_at.utcoffset() == timedelta(0)
    assert (got.endpoint_version, got.endpoint_failing) == (1, False)
    assert await _claim(db, account_id, "lease_b") == []


async def test_saturated_endpoints_are_skipped(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    busy, _ = await make_endpoint(URL)
    free, _ = await make_endpoint(URL)
    await _queue(db, account_id, 1)
    got = await _claim(db, account_id, "lease_a", (busy,))
    assert [item.endpoint_id for item in got] == [free]


async def test_the_claims_settings_stay_with_the_claim(
    postgresql_url: str, account_id: str, make_endpoint: MakeEndpoint, db: Database
) -> None:
    """PostgreSQL: the claim turns synchronous_commit off and plans afresh for its own
    transaction only; the pooled connection it ran on commits durably and caches plans again
    for whoever borrows it next."""
    if db.is_sqlite:
        pytest.skip("synchronous_commit is PostgreSQL's")
    one = Database(postgresql_url, pool_size=1)
    try:
        await make_endpoint(URL)
        await _queue(db, account_id, 2)
        assert await _claim(one, account_id, "lease_durable")
        async with one.autocommit() as conn:
            assert await conn.fetchval("SHOW synchronous_commit") == "on"
            assert await conn.fetchval("SHOW plan_cache_mode") == "auto"
    finally:
        await one.dispose()
