"""One account's endpoints never hold up another's deliveries, on SQLite and PostgreSQL: claims
take turns across accounts, an account holds at most its share of a worker's slots, and an
outcome that cannot be recorded keeps no other from being recorded."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from support import in_background, new_account
from ustun import clock
from ustun.store import Database
from ustun.webhooks import endpoints as ops
from ustun.webhooks.adapters import for_database
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending import dispatcher as dispatcher_module
from ustun.webhooks.sending.dispatcher import DispatchConfig, Dispatcher
from ustun.webhooks.sending.outbox import emit
from ustun.webhooks.store import Claim
from ustun.webhooks.tables import attempts, deliveries, endpoints
from webhook_support import Receiver, hold, status, until

URL = "http://127.0.0.1:9/hook"


async def _endpoint(db: Database, box: SecretBox, account_id: str, url: str, **extra: int) -> str:
    async with db.unit_of_work() as uow:
        endpoint_id, _ = await ops.create(
            uow,
            box,
            account_id,
            url=url,
            events=("*",),
            **extra,  # type: ignore[arg-type]
        )
    return endpoint_id


async def _emit(db: Database, account_id: str, n: int) -> list[str]:
    async with db.unit_of_work() as uow:
        return [await emit(uow, account_id, "payment.created", {"id": f"p{i}"}) for i in range(n)]


async def _status(db: Database, event_ids: list[str]) -> list[str]:
    async with db.read() as conn:
        rows = await conn.scalars(
            select(deliveries.c.status).where(deliveries.c.event_id.in_(event_ids))
        )
        return list(rows)


async def _all(db: Database, event_ids: list[str], wanted: str) -> bool:
    found = await _status(db, event_ids)
    return len(found) == len(event_ids) and set(found) == {wanted}


async def _claim(db: Database, accounts: list[str], **options: Any) -> list[Claim]:
    """A claim that leaves alone every endpoint but those of `accounts` (other tests' too)."""
    async with db.read() as conn:
        others = list(
            await conn.scalars(
                select(endpoints.c.id).where(endpoints.c.account_id.not_in(accounts))
            )
        )
    now = clock.now()
    return await for_database(db).claim(
        db,
        now=now,
        lease_until=now + timedelta(seconds=60),
        token=f"lease_{accounts[0]}",
        skip=others,
        **options,
    )


async def test_a_claim_takes_turns_across_accounts(db: Database, box: SecretBox) -> None:
    """An account's older backlog does not fill the claim: the other's newer delivery is in it."""
    busy, quiet = await new_account(db, "busy"), await new_account(db, "quiet")
    for _ in range(3):
        await _endpoint(db, box, busy, URL, max_in_flight=50)
    await _endpoint(db, box, quiet, URL)
    await _emit(db, busy, 30)  # three deliveries of each event
    (fresh,) = await _emit(db, quiet, 1)
    claimed = await _claim(db, [busy, quiet], limit=10)
    assert len(claimed) == 10
    assert fresh in {item.event_id for item in claimed}


async def test_an_account_gets_no_more_than_its_room_in_a_claim(
    db: Database, box: SecretBox
) -> None:
    busy, quiet = await new_account(db, "busy"), await new_account(db, "quiet")
    await _endpoint(db, box, busy, URL, max_in_flight=50)
    await _endpoint(db, box, quiet, URL, max_in_flight=50)
    await _emit(db, busy, 20)
    await _emit(db, quiet, 20)
    claimed = await _claim(
        db, [busy, quiet], limit=40, account_room={busy: 3, quiet: 0}, account_limit=5
    )
    assert len(claimed) == 3  # `quiet` has no room left; `busy` has three slots


async def test_hung_endpoints_of_one_account_leave_room_for_anothers(
    db: Database, box: SecretBox, config: DispatchConfig
) -> None:
    """Four endpoints of one account hang with 64 requests' room between them, more than the
    worker's 32 slots: the account holds half of those, and another's deliveries flow."""
    tarpit, fast = Receiver(), Receiver()
    gate = asyncio.Event()
    tarpit.script["/hook"] = [hold(gate)] * 200
    await tarpit.start()
    await fast.start()
    busy, quiet = await new_account(db, "busy"), await new_account(db, "quiet")
    small = dataclasses.replace(config, timeout=60.0, max_in_flight=32)
    try:
        async with in_background(Dispatcher(db, box, small)):
            try:
                for _ in range(4):
                    await _endpoint(db, box, busy, tarpit.url(), max_in_flight=16)
                await _endpoint(db, box, quiet, fast.url())
                await _emit(db, busy, 40)
                await until(
                    lambda: _true(tarpit.in_flight == 16), what="the busy account at its share"
                )
                wanted = await _emit(db, quiet, 10)
                await until(lambda: _all(db, wanted, "succeeded"), what="the quiet deliveries")
                assert tarpit.most_in_flight == 16  # half of the 32 slots, however many ask
            finally:
                gate.set()
    finally:
        await tarpit.stop()
        await fast.stop()


async def test_an_outcome_that_cannot_be_recorded_keeps_no_other_from_it(
    db: Database,
    box: SecretBox,
    config: DispatchConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fault planning one outcome (here, injected for one Retry-After value) costs only that
    outcome: the others of its batch are recorded."""
    parse = dispatcher_module.parse_retry_after

    def faulty(value: str | None) -> float | None:
        if value == "poison":
            raise RuntimeError("injected fault")
        return parse(value)

    monkeypatch.setattr(dispatcher_module, "parse_retry_after", faulty)
    hostile, fine = Receiver(), Receiver()
    hostile.script["/hook"] = [status(429, {"Retry-After": "poison"})] * 100
    await hostile.start()
    await fine.start()
    attacker, victim = await new_account(db, "attacker"), await new_account(db, "victim")
    try:
        await _endpoint(db, box, attacker, hostile.url())
        await _endpoint(db, box, victim, fine.url())
        async with in_background(Dispatcher(db, box, config)):
            # Committed together, so their outcomes arrive together and share a batch.
            async with db.unit_of_work() as uow:
                bad = await emit(uow, attacker, "payment.created", {"id": "p"})
                good = [await emit(uow, victim, "payment.created", {"id": f"p{i}"}) for i in "ab"]
            await until(lambda: _all(db, good, "succeeded"), what="the victim's deliveries")
            await until(lambda: _true(len(hostile.received) >= 1), what="the hostile attempt")
        assert len(fine.received) == 2  # recorded at once, so never sent again
        assert await _status(db, [bad]) == ["pending"]
    finally:
        await hostile.stop()
        await fine.stop()


@pytest.mark.parametrize("digits", [400, 5000])
async def test_a_hostile_retry_after_is_recorded_with_the_others(
    db: Database, box: SecretBox, config: DispatchConfig, digits: int
) -> None:
    """A receiver answering 429 with a Retry-After of hundreds of digits gets a failed attempt
    and a retry on the schedule; another account's outcomes beside it are recorded."""
    hostile, fine = Receiver(), Receiver()
    hostile.script["/hook"] = [status(429, {"Retry-After": "9" * digits})]
    await hostile.start()
    await fine.start()
    attacker, victim = await new_account(db, "attacker"), await new_account(db, "victim")
    try:
        await _endpoint(db, box, attacker, hostile.url())
        await _endpoint(db, box, victim, fine.url())
        patient = dataclasses.replace(config, retry_schedule=(60.0,))
        async with in_background(Dispatcher(db, box, patient)):
            async with db.unit_of_work() as uow:
                bad = await emit(uow, attacker, "payment.created", {"id": "p"})
                good = await emit(uow, victim, "payment.created", {"id": "p"})
            await until(lambda: _all(db, [good], "succeeded"), what="the victim's delivery")
            await until(lambda: _all(db, [bad], "failed"), what="the hostile delivery's failure")
        async with db.read() as conn:
            row = (await conn.execute(select(deliveries).where(deliveries.c.event_id == bad))).one()
            recorded = await conn.scalar(
                select(attempts.c.status_code).where(attempts.c.delivery_id == row.id)
            )
        assert recorded == 429
        # The schedule's 60 s ±20 %, clamped as any Retry-After is (at most twice the delay).
        assert row.next_attempt_at - clock.now() < timedelta(seconds=150)
    finally:
        await hostile.stop()
        await fine.stop()


async def _true(value: bool) -> bool:
    return value


async def test_a_send_that_raises_is_a_failed_attempt_and_frees_its_slot(
    db: Database, box: SecretBox, config: DispatchConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected error sending (injected here) is recorded as a failed attempt, and the
    endpoint's and the account's slots come back."""
    post = dispatcher_module.transport.post
    fine = Receiver()
    faults = [RuntimeError("injected fault")]

    async def faulty(http: Any, url: str, *args: Any, **kwargs: Any) -> Any:
        # Only this test's receiver: the dispatcher also serves other tests' leftovers.
        if url == fine.url() and faults:
            raise faults.pop()
        return await post(http, url, *args, **kwargs)

    monkeypatch.setattr(dispatcher_module.transport, "post", faulty)
    await fine.start()
    account = await new_account(db, "faulty")
    try:
        await _endpoint(db, box, account, fine.url(), max_in_flight=1)
        fast = dataclasses.replace(config, retry_schedule=(0.2,))
        async with in_background(Dispatcher(db, box, fast)) as running:
            sent = await _emit(db, account, 1)
            await until(lambda: _all(db, sent, "succeeded"), what="the retried delivery")
            assert not running._sending
            assert not running._account_sending
        mine = select(deliveries.c.id).where(deliveries.c.event_id.in_(sent))
        async with db.read() as conn:
            errors = list(
                await conn.scalars(
                    select(attempts.c.error)
                    .where(attempts.c.delivery_id.in_(mine.scalar_subquery()))
                    .order_by(attempts.c.attempted_at)
                )
            )
        assert errors[0] == "internal error: RuntimeError"
    finally:
        await fine.stop()
