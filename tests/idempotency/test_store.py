"""The record-store contract, on SQLite, PostgreSQL and Redis."""

from __future__ import annotations

import asyncio

from ustun.idempotency import Claimed, Found, RecordStore, State, StoredResponse

RESPONSE = StoredResponse(
    201, (("content-type", "application/json"), ("location", "/v1/payments/pay_1")), b'{"a":1}'
)


async def claim(store: RecordStore, scope: str, key: str = "k", fp: str = "f" * 64, **kw: float):  # type: ignore[no-untyped-def]
    return await store.claim(scope, key, fp, lease=kw.get("lease", 30), ttl=kw.get("ttl", 60))


async def test_first_claim_wins_and_duplicates_see_it_in_progress(
    record_store: RecordStore, scope: str
) -> None:
    first = await claim(record_store, scope)
    assert isinstance(first, Claimed)
    again = await claim(record_store, scope, fp="other")
    assert isinstance(again, Found)
    assert again.record.state is State.IN_PROGRESS
    assert again.record.fingerprint == "f" * 64
    assert again.record.response is None


async def test_completed_record_returns_the_exact_response(
    record_store: RecordStore, scope: str
) -> None:
    first = await claim(record_store, scope)
    assert isinstance(first, Claimed)
    assert await record_store.complete(scope, "k", first.lease_token, RESPONSE, ttl=60)
    found = await claim(record_store, scope)
    assert isinstance(found, Found)
    assert found.record.state is State.COMPLETED
    assert found.record.response == RESPONSE


async def test_empty_and_unkept_bodies_stay_distinct(record_store: RecordStore, scope: str) -> None:
    for key, body in (("empty", b""), ("unkept", None), ("binary", bytes(range(256)))):
        first = await claim(record_store, scope, key)
        assert isinstance(first, Claimed)
        response = StoredResponse(200, (), body)
        assert await record_store.complete(scope, key, first.lease_token, response, ttl=60)
        found = await claim(record_store, scope, key)
        assert isinstance(found, Found)
        assert found.record.response == response


async def test_completion_and_release_are_fenced_by_the_lease_token(
    record_store: RecordStore, scope: str
) -> None:
    first = await claim(record_store, scope)
    assert isinstance(first, Claimed)
    assert not await record_store.complete(scope, "k", "not-my-token", RESPONSE, ttl=60)
    await record_store.release(scope, "k", "not-my-token")
    assert isinstance(await claim(record_store, scope), Found)
    await record_store.release(scope, "k", first.lease_token)
    assert isinstance(await claim(record_store, scope), Claimed)


async def test_an_expired_lease_is_taken_over_and_the_old_holder_is_fenced_off(
    record_store: RecordStore, scope: str
) -> None:
    dead = await claim(record_store, scope, lease=0)
    assert isinstance(dead, Claimed)
    taker = await claim(record_store, scope, fp="new")
    assert isinstance(taker, Claimed)
    assert taker.lease_token != dead.lease_token
    assert not await record_store.complete(scope, "k", dead.lease_token, RESPONSE, ttl=60)
    assert await record_store.complete(scope, "k", taker.lease_token, RESPONSE, ttl=60)
    found = await claim(record_store, scope, fp="new")
    assert isinstance(found, Found)
    assert found.record.fingerprint == "new"


async def test_a_completed_record_is_never_taken_over_before_it_expires(
    record_store: RecordStore, scope: str
) -> None:
    first = await claim(record_store, scope, lease=0)
    assert isinstance(first, Claimed)
    assert await record_store.complete(scope, "k", first.lease_token, RESPONSE, ttl=60)
    assert isinstance(await claim(record_store, scope), Found)


async def test_expired_records_count_as_absent(record_store: RecordStore, scope: str) -> None:
    first = await claim(record_store, scope)
    assert isinstance(first, Claimed)
    assert await record_store.complete(scope, "k", first.lease_token, RESPONSE, ttl=0.001)
    await asyncio.sleep(0.01)  # past the TTL: a fact about the clock, not a race
    assert isinstance(await claim(record_store, scope), Claimed)


async def test_scopes_never_collide(record_store: RecordStore, scope: str) -> None:
    assert isinstance(await claim(record_store, scope), Claimed)
    assert isinstance(await claim(record_store, scope + "x"), Claimed)
    # Separator-safe: ("a:b", "c") and ("a", "b:c") are different records.
    assert isinstance(await claim(record_store, f"{scope}:b", "c"), Claimed)
    assert isinstance(await claim(record_store, scope, "b:c"), Claimed)


async def test_concurrent_claims_have_exactly_one_winner(
    record_store: RecordStore, scope: str
) -> None:
    results = await asyncio.gather(*(claim(record_store, scope) for _ in range(16)))
    assert sum(isinstance(r, Claimed) for r in results) == 1
