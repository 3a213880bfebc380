"""Claims on both backends: disjoint between workers, each endpoint within its room across all
of them (`max_in_flight`, rate-limit slots, FIFO head), with their event."""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from ustun import clock, ids
from ustun.http.preconditions import Preconditions
from ustun.store import Database
from ustun.webhooks import operations
from ustun.webhooks.adapters import for_database
from ustun.webhooks.sending.outbox import emit
from ustun.webhooks.store import Attempt, Claim, Settlement
from ustun.webhooks.tables import attempts, deliveries, endpoints
from webhook_support import MakeEndpoint, until

URL = "http://127.0.0.1:9/hook"
LEASE = timedelta(seconds=60)
FAR = clock.now() + timedelta(days=1)


async def _queue(db: Database, account_id: str, n: int) -> list[str]:
    async with db.unit_of_work() as uow:
        return [await emit(uow, account_id, "payment.created", {"id": f"p{i}"}) for i in range(n)]


async def _claim(
    db: Database,
    account_id: str,
    token: str,
    skip: tuple[str, ...] = (),
    *,
    later: timedelta = timedelta(0),
    finished: tuple[str, ...] = (),
) -> list[Claim]:
    """A claim (made `later` than now) that leaves alone every other test's endpoints."""
    async with db.read() as conn:
        others = await conn.scalars(
            select(endpoints.c.id).where(endpoints.c.account_id != account_id)
        )
        skipped = [*others, *skip]
    now = clock.now() + later
    return await for_database(db).claim(
        db, limit=20, now=now, lease_until=now + LEASE, token=token, skip=skipped, finished=finished
    )


async def test_concurrent_claims_take_disjoint_rows_within_the_endpoints_cap(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    await make_endpoint(URL, max_in_flight=4)
    await _queue(db, account_id, 30)
    a, b = await asyncio.gather(
        _claim(db, account_id, "lease_a"), _claim(db, account_id, "lease_b")
    )
    c = await _claim(db, account_id, "lease_c")
    taken = [{item.id for item in batch} for batch in (a, b, c)]
    assert len(taken[0] | taken[1]) == len(a) + len(b) == 4
    assert c == []


async def test_settled_deliveries_free_their_room_and_a_dead_workers_free_at_its_lease_end(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    await make_endpoint(URL, max_in_flight=2)
    await _queue(db, account_id, 3)
    first = await _claim(db, account_id, "lease_a")
    assert len(first) == 2
    async with db.unit_of_work() as uow:
        done = [Settlement(first[0].id, "succeeded", 1, None)]
        await for_database(db).settle(uow, done, [], now=clock.now(), token="lease_a")
    (third,) = await _claim(db, account_id, "lease_b")
    assert await _claim(db, account_id, "lease_b") == []
    # Workers a and b died holding one each: once their leases end, so do their slots.
    after = await _claim(db, account_id, "lease_c", later=LEASE + timedelta(seconds=1))
    assert {item.id for item in after} == {first[1].id, third.id}


async def test_a_finished_request_frees_its_slot_before_its_outcome_is_recorded(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    await make_endpoint(URL, max_in_flight=2)
    await _queue(db, account_id, 4)
    first = await _claim(db, account_id, "lease_a")
    assert len(first) == 2
    assert await _claim(db, account_id, "lease_b") == []
    # Worker a's first request is over; its outcome is still on the way to the database.
    (next_one,) = await _claim(db, account_id, "lease_a", finished=(first[0].id,))
    assert next_one.id not in {item.id for item in first}
    assert await _claim(db, account_id, "lease_a", finished=(first[0].id,)) == []


async def test_a_rate_limited_endpoint_gets_its_slots_within_the_horizon_spaced_apart(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    endpoint_id, _ = await make_endpoint(URL, rate_limit=4, max_in_flight=20)
    await _queue(db, account_id, 10)
    got = sorted(await _claim(db, account_id, "lease_a"), key=lambda item: item.send_at)
    # Slots at 0, 0.25, ..., 1.0 s: the five that start within the one-second horizon.
    assert len(got) == 5
    gaps = [(b.send_at - a.send_at).total_seconds() for a, b in itertools.pairwise(got)]
    assert gaps == pytest.approx([0.25] * 4)
    assert await _claim(db, account_id, "lease_b") == []
    later = await _claim(db, account_id, "lease_b", later=timedelta(seconds=1))
    assert later
    assert min(item.send_at for item in later) >= got[-1].send_at + timedelta(seconds=0.25)
    # Without its limit, the endpoint no longer waits for the slot it had reached.
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            update(endpoints)
            .where(endpoints.c.id == endpoint_id)
            .values(rate_limit=None, next_send_at=FAR)
        )
    assert await _claim(db, account_id, "lease_c")


async def _head(
    db: Database, account_id: str, token: str, *, later: timedelta = timedelta(0)
) -> Claim:
    """A FIFO endpoint's head, claimed once every transaction older than its event's has ended
    (PostgreSQL: the cluster's oldest open transaction, which another test may be holding)."""

    async def claimed() -> list[Claim]:
        return await _claim(db, account_id, token, later=later)

    (head,) = await until(claimed, what="the FIFO head to be offered")
    return head


async def test_a_fifo_endpoint_offers_only_its_head_and_a_waiting_retry_blocks_the_rest(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    await make_endpoint(URL, ordering="fifo", max_in_flight=8)
    events = await _queue(db, account_id, 3)
    head = await _head(db, account_id, "lease_a")
    assert head.event_id == events[0]
    assert await _claim(db, account_id, "lease_b") == []
    async with db.unit_of_work() as uow:
        await for_database(db).settle(
            uow,
            [Settlement(head.id, "failed", 1, clock.now() + timedelta(seconds=30))],
            [],
            now=clock.now(),
            token="lease_a",
        )
    assert await _claim(db, account_id, "lease_b") == []
    again = await _head(db, account_id, "lease_b", later=timedelta(seconds=31))
    assert again.id == head.id
    async with db.unit_of_work() as uow:
        await for_database(db).settle(
            uow, [Settlement(head.id, "dead", 2, None)], [], now=clock.now(), token="lease_b"
        )
    second = await _head(db, account_id, "lease_c", later=timedelta(seconds=31))
    assert second.event_id == events[1]


async def _settle(db: Database, claimed: list[Claim], token: str, status: str) -> None:
    """Record one attempt of each claimed delivery: `succeeded`, or `failed` and due again."""
    now = clock.now()
    async with db.unit_of_work() as uow:
        await for_database(db).settle(
            uow,
            [
                Settlement(c.id, status, c.attempt_count + 1, now if status == "failed" else None)
                for c in claimed
            ],
            [Attempt(ids.new_id("att"), c.id, now, 500, 1.0, None, None) for c in claimed],
            now=now,
            token=token,
        )


async def _attempts_of(db: Database, delivery_ids: list[str]) -> list[str]:
    async with db.read() as conn:
        found = await conn.scalars(
            select(attempts.c.delivery_id).where(attempts.c.delivery_id.in_(delivery_ids))
        )
        return sorted(found)


async def test_an_endpoint_deleted_in_flight_takes_its_attempts_and_the_batch_still_settles(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    """Deleting an endpoint deletes its deliveries' attempts; a batch of outcomes that includes
    one of its deliveries, finished after the deletion, records the rest and no orphan attempt."""
    gone, _ = await make_endpoint(URL)
    kept, _ = await make_endpoint(URL)
    await _queue(db, account_id, 1)
    first = await _claim(db, account_id, "lease_a")
    assert sorted(c.endpoint_id for c in first) == sorted([gone, kept])
    await _settle(db, first, "lease_a", "failed")
    again = await _claim(db, account_id, "lease_b")
    assert {c.id for c in again} == {c.id for c in first}
    by_endpoint = {c.endpoint_id: c.id for c in again}
    assert await _attempts_of(db, [by_endpoint[gone]]) == [by_endpoint[gone]]

    await operations.delete_endpoint(db, account_id, gone, Preconditions())
    assert await _attempts_of(db, [by_endpoint[gone]]) == []
    await _settle(db, again, "lease_b", "succeeded")

    assert await _attempts_of(db, list(by_endpoint.values())) == [by_endpoint[kept]] * 2
    async with db.read() as conn:
        left = (await conn.execute(select(deliveries.c.id, deliveries.c.status))).all()
    assert [tuple(row) for row in left if row.id in by_endpoint.values()] == [
        (by_endpoint[kept], "succeeded")
    ]


async def test_skipped_endpoints_are_left_alone(
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
