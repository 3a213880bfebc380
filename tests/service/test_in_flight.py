"""Each account's requests in progress (issue 27): past its cap they wait in its own queue.

The request rate counts requests, not their cost: B's 64 concurrent pages of 100 (SQLite) and
its 256 transfers waiting on two ledger rows (PostgreSQL) took the event loop and the pools
from A, whose p99 reached 201 and 481 ms beside them. Now one account's requests beyond
`USTUN_MAX_REQUESTS_IN_FLIGHT` wait for one of its own to answer, and another's never wait.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

import httpx
import pytest
from fastapi import FastAPI

from job_kinds import eventually
from ustun import clock, jobs
from ustun.service import create_app
from ustun.service.plumbing.accounts import account_for_key, create_key
from ustun.service.plumbing.in_flight import AccountSlots
from ustun.settings import Settings
from ustun.store import Database

T = TypeVar("T")


async def test_past_its_limit_an_account_waits_in_order_and_no_other_waits() -> None:
    slots = AccountSlots(2)
    await slots.acquire("b")
    await slots.acquire("b")
    first = asyncio.create_task(slots.acquire("b"))
    second = asyncio.create_task(slots.acquire("b"))
    await eventually(_now(lambda: slots.waiting("b") == 2), within=5, what="B's two waiters")
    await asyncio.wait_for(slots.acquire("a"), 1)  # A's first request never waits on B's
    assert slots.held("a") == 1
    slots.release("b")
    await asyncio.wait_for(first, 1)
    assert not second.done()
    assert (slots.held("b"), slots.waiting("b")) == (2, 1)
    slots.release("b")
    await asyncio.wait_for(second, 1)
    for account in ("b", "b", "a"):
        slots.release(account)
    assert (slots.held("b"), slots.held("a"), slots.waiting("b")) == (0, 0, 0)
    assert (slots._held, slots._waiting) == ({}, {})  # an idle account is forgotten


async def test_a_waiter_cancelled_waiting_or_just_granted_passes_on_nothing_it_did_not_hold() -> (
    None
):
    slots = AccountSlots(1)
    await slots.acquire("b")
    gone = asyncio.create_task(slots.acquire("b"))
    granted = asyncio.create_task(slots.acquire("b"))
    await eventually(_now(lambda: slots.waiting("b") == 2), within=5, what="B's two waiters")
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    assert slots.waiting("b") == 1
    slots.release("b")  # to `granted`, which has not run yet: cancelled now, it passes it on
    granted.cancel()
    await asyncio.gather(granted, return_exceptions=True)
    assert (slots.held("b"), slots.waiting("b")) == (0, 0)
    await asyncio.wait_for(slots.acquire("b"), 1)


def _now(check: Callable[[], T]) -> Callable[[], Awaitable[T]]:
    """`check` as the coroutine function `eventually` awaits."""

    async def run() -> T:
        return check()

    return run


@pytest.fixture
async def held() -> asyncio.Event:
    """Set to let the transfers held between their moves go on."""
    return asyncio.Event()


async def _app(settings: Settings, db: Database, held: asyncio.Event, cap: int) -> FastAPI:
    return create_app(
        settings.model_copy(update={"max_requests_in_flight": cap}),
        db=db,
        between_transfer_moves=held.wait,
    )


@pytest.fixture
async def app(settings: Settings, db: Database, held: asyncio.Event) -> AsyncIterator[FastAPI]:
    """The service with one request in progress per account; transfers wait for `held`."""
    capped = await _app(settings, db, held, 1)
    async with capped.router.lifespan_context(capped):
        yield capped


def _client(app: FastAPI, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://testserver",
        headers={"authorization": f"Bearer {key}"},
    )


async def _held_transfer(http: httpx.AsyncClient) -> asyncio.Task[httpx.Response]:
    """A transfer between two new ledger accounts of `http`'s, held between its moves."""
    ids = []
    for balance in (100, 0):
        made = await http.post(
            "/v1/ledger-accounts",
            json={"currency": "EUR", "balance": balance},
            headers={"idempotency-key": uuid.uuid4().hex},
        )
        ids.append(made.json()["id"])
    body = {"from": ids[0], "to": ids[1], "amount": 1, "currency": "EUR"}
    return asyncio.create_task(
        http.post("/v1/transfers", json=body, headers={"idempotency-key": uuid.uuid4().hex})
    )


async def test_a_request_past_the_cap_waits_for_its_own_accounts_and_others_go_on(
    app: FastAPI, db: Database, api_key: str, held: asyncio.Event
) -> None:
    slots: AccountSlots = app.state.request_slots
    account = await account_for_key(db, api_key)
    assert account is not None
    other = await create_key(db, f"other-{uuid.uuid4().hex[:12]}")
    async with _client(app, api_key) as b, _client(app, other) as a:
        assert (await a.get("/v1/payments")).status_code == 200  # A's key noted as used, cached
        moving = await _held_transfer(b)
        await eventually(_now(lambda: slots.held(account.id)), within=10, what="B's transfer")
        listing = asyncio.create_task(b.get("/v1/payments"))
        await eventually(_now(lambda: slots.waiting(account.id)), within=10, what="B's wait")
        answer = await asyncio.wait_for(a.get("/v1/payments"), 10)  # A's does not wait on B's
        assert answer.status_code == 200
        assert not listing.done()
        held.set()
        moved, listed = await asyncio.wait_for(asyncio.gather(moving, listing), 10)
    assert (moved.status_code, listed.status_code) == (201, 200)
    assert (slots.held(account.id), slots.waiting(account.id)) == (0, 0)


async def test_a_stream_holds_no_slot_once_its_answer_has_started(
    app: FastAPI, db: Database, api_key: str
) -> None:
    slots: AccountSlots = app.state.request_slots
    account = await account_for_key(db, api_key)
    assert account is not None
    job = await jobs.enqueue(
        db, "slow", account_id=account.id, run_at=clock.now() + timedelta(hours=1)
    )
    async with _client(app, api_key) as b:
        stream = asyncio.create_task(b.get(f"/v1/jobs/{job.id}/events"))
        await eventually(
            _now(lambda: app.state.job_watch.open_streams), within=10, what="the stream"
        )
        answer = await asyncio.wait_for(b.get("/v1/payments"), 10)
        assert answer.status_code == 200
        assert not stream.done()
        assert slots.held(account.id) == 0  # the open stream holds none
        await jobs.cancel(db, job.id, account_id=account.id)
        assert (await asyncio.wait_for(stream, 10)).status_code == 200


async def test_a_cap_of_zero_caps_nothing(
    settings: Settings, db: Database, api_key: str, held: asyncio.Event
) -> None:
    uncapped = await _app(settings, db, held, 0)
    assert uncapped.state.request_slots is None
    async with uncapped.router.lifespan_context(uncapped), _client(uncapped, api_key) as b:
        moving = await _held_transfer(b)
        for _ in range(2):  # beside the held transfer: more than a cap of one would let in
            assert (await asyncio.wait_for(b.get("/v1/payments"), 10)).status_code == 200
        assert not moving.done()
        held.set()
        assert (await asyncio.wait_for(moving, 10)).status_code == 201
