"""Payload retention, on SQLite and PostgreSQL: the sweeper expunges what is older than the
retention (the clock moved forward), keeps the record, and an expunged event is never sent.

Each test has a database of its own: a sweep expunges every account's old events.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from pydantic import ValidationError
from sqlalchemy import select, update

from support import in_background, new_account
from ustun import clock
from ustun.errors import ProblemError
from ustun.http.problem import CATALOGUE
from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks import operations, retention
from ustun.webhooks.adapters import for_database
from ustun.webhooks.records import EXPUNGED_DATA, Delivery
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending.dispatcher import DispatchConfig, Dispatcher
from ustun.webhooks.sending.outbox import emit
from ustun.webhooks.states import Status
from ustun.webhooks.tables import deliveries, events
from webhook_support import MakeEndpoint, Receiver, attempts_of, delivery_of, settled, status

RETENTION = 30 * 86_400.0


@pytest.fixture
async def db(own_database_url: str) -> AsyncIterator[Database]:
    """This test's own database (overrides the shared one every other fixture builds on)."""
    database = Database(own_database_url)
    yield database
    await database.dispose()


@pytest.fixture
def moved_clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[timedelta], datetime]:
    """Move `ustun.clock.now` forward from the real time by a given amount; returns the
    moved "now" of that moment (the clock keeps running from there)."""

    real = clock.now

    def move(by: timedelta) -> datetime:
        monkeypatch.setattr(clock, "now", lambda: real() + by)
        return real() + by

    return move


async def send(db: Database, account_id: str, **data: Any) -> str:
    async with db.unit_of_work() as uow:
        return await emit(uow, account_id, "payment.created", {"id": "pay_1", **data})


async def event_row(db: Database, event_id: str) -> Any:
    async with db.read() as conn:
        return (await conn.execute(select(events).where(events.c.id == event_id))).one()


async def answered(receiver: Receiver, body: str) -> None:
    """Every request the receiver gets from now on is answered 200 with `body`."""

    async def reply(_: web.Request) -> web.StreamResponse:
        return web.Response(text=body)

    receiver.script["/hook"] = [reply] * 10


async def test_the_sweeper_expunges_what_is_past_retention_and_keeps_the_record(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
    moved_clock: Callable[[timedelta], datetime],
) -> None:
    await make_endpoint(receiver.url())
    await answered(receiver, "thanks, old")
    old_id = await send(db, account_id, amount=100)
    old_delivery = await settled(db, old_id, "succeeded")
    moved_clock(timedelta(days=20))
    await answered(receiver, "thanks, young")
    young_id = await send(db, account_id, amount=200)
    young_delivery = await settled(db, young_id, "succeeded")
    old_before, young_before = await event_row(db, old_id), await event_row(db, young_id)
    assert young_before.created_at - old_before.created_at >= timedelta(days=20)
    [old_attempt] = await attempts_of(db, old_delivery.id)
    assert old_attempt.response == "thanks, old"

    now = moved_clock(timedelta(days=31))
    assert await retention.sweep(db, retention=RETENTION) == 1

    old = await event_row(db, old_id)
    assert old.data == EXPUNGED_DATA
    assert old.expunged_at is not None
    assert abs(old.expunged_at - now) < timedelta(minutes=1)
    assert (old.id, old.type, old.account_id, old.created_at, old.seq) == (
        old_before.id,
        old_before.type,
        old_before.account_id,
        old_before.created_at,
        old_before.seq,
    )
    kept = await delivery_of(db, old_id)
    assert (kept.status, kept.attempt_count) == ("succeeded", 1)
    [expunged_attempt] = await attempts_of(db, old_delivery.id)
    assert expunged_attempt.response is None
    assert {**expunged_attempt._asdict(), "response": "thanks, old"} == old_attempt._asdict()

    young = await event_row(db, young_id)
    assert young == young_before
    assert '"amount":200' in young.data
    [young_attempt] = await attempts_of(db, young_delivery.id)
    assert young_attempt.response == "thanks, young"

    # Nothing is left past retention: the next sweep finds nothing, until the young one ages.
    assert await retention.sweep(db, retention=RETENTION) == 0
    moved_clock(timedelta(days=51))
    assert await retention.sweep(db, retention=RETENTION) == 1
    assert (await event_row(db, young_id)).data == EXPUNGED_DATA


async def test_the_sweeper_works_in_batches(
    db: Database,
    account_id: str,
    monkeypatch: pytest.MonkeyPatch,
    moved_clock: Callable[[timedelta], datetime],
) -> None:
    monkeypatch.setattr(retention, "EXPUNGE_BATCH", 3)
    sent = [await send(db, account_id, n=n) for n in range(7)]
    moved_clock(timedelta(days=31))
    assert await retention.sweep(db, retention=RETENTION) == 7
    assert {(await event_row(db, e)).data for e in sent} == {EXPUNGED_DATA}


async def test_a_pending_delivery_of_an_expunged_event_is_given_up_unsent(
    db: Database,
    box: SecretBox,
    config: DispatchConfig,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
) -> None:
    """Expunged before any dispatcher ran: dead at once, with the reason; never sent, while
    the next event to the same endpoint is."""
    await make_endpoint(receiver.url())
    gone_id = await send(db, account_id, amount=1)
    expunged = await retention.expunge_event(db, account_id, gone_id)
    assert expunged.data == EXPUNGED_DATA
    assert expunged.expunged_at is not None
    dead = await delivery_of(db, gone_id)
    assert (dead.status, dead.next_attempt_at, dead.attempt_count) == ("dead", None, 0)
    [reason] = await attempts_of(db, dead.id)
    assert (reason.status_code, reason.error) == (None, retention.EXPUNGED_REASON)

    async with in_background(Dispatcher(db, box, config)):
        kept_id = await send(db, account_id, amount=2)
        await settled(db, kept_id, "succeeded")
    assert [r.headers["webhook-id"] for r in receiver.received] == [kept_id]
    assert (await delivery_of(db, gone_id)).status == "dead"


async def test_the_dispatcher_never_sends_an_expunged_event(
    db: Database,
    box: SecretBox,
    config: DispatchConfig,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
) -> None:
    """A delivery due although its event was expunged (made due by a write that raced the
    expunge): the dispatcher claims it, sends nothing, and records it dead with the reason."""
    await make_endpoint(receiver.url())
    receiver.script["/hook"] = [status(500)]
    slow_retries = dataclasses.replace(config, retry_schedule=(3600.0,))
    async with in_background(Dispatcher(db, box, slow_retries)):
        event_id = await send(db, account_id, amount=3)
        failed = await settled(db, event_id, "failed")
        async with db.unit_of_work() as uow:  # the payload goes, the delivery is due again
            await uow.conn.execute(
                update(events)
                .where(events.c.id == event_id)
                .values(data=EXPUNGED_DATA, expunged_at=clock.now())
            )
            await uow.conn.execute(
                update(deliveries)
                .where(deliveries.c.id == failed.id)
                .values(next_attempt_at=clock.now())
            )
        dead = await settled(db, event_id, "dead")
    assert dead.attempt_count == failed.attempt_count == 1
    tried = await attempts_of(db, dead.id)
    assert [(a.status_code, a.error) for a in tried] == [
        (500, tried[0].error),
        (None, retention.EXPUNGED_REASON),
    ]
    assert len(receiver.received) == 1  # the first attempt only, before the expunge


async def test_expunged_events_are_not_retried_nor_recovered(
    db: Database, account_id: str, make_endpoint: MakeEndpoint, receiver: Receiver
) -> None:
    endpoint_id, _ = await make_endpoint(receiver.url())
    event_id = await send(db, account_id, amount=4)
    await retention.expunge_event(db, account_id, event_id)
    delivery = await delivery_of(db, event_id)
    with pytest.raises(ProblemError) as refused:
        await operations.retry_delivery(db, account_id, delivery.id)
    assert refused.value.slug == "event-expunged"
    assert CATALOGUE["event-expunged"].status == 409
    since = clock.now() - timedelta(days=1)
    assert await operations.recover(db, account_id, endpoint_id, since) == 0
    # The plan the frameworks' retries run (Django admin, Flask) leaves it dead too.
    async with db.unit_of_work() as uow:
        changed = await for_database(db).retry(
            uow, Delivery._make(delivery), Status.PENDING, clock.now()
        )
    assert changed  # the endpoint is enabled; the expunged delivery is what stays out
    after = await delivery_of(db, event_id)
    assert (after.status, after.next_attempt_at) == ("dead", None)


async def test_expunge_is_idempotent_and_scoped_to_the_account(
    db: Database, account_id: str, make_endpoint: MakeEndpoint, receiver: Receiver
) -> None:
    await make_endpoint(receiver.url())
    event_id = await send(db, account_id, amount=5)
    first = await retention.expunge_event(db, account_id, event_id)
    again = await retention.expunge_event(db, account_id, event_id)
    assert again == first
    assert len(await attempts_of(db, (await delivery_of(db, event_id)).id)) == 1
    stranger = await new_account(db)
    with pytest.raises(ProblemError) as missing:
        await retention.expunge_event(db, stranger, event_id)
    assert missing.value.slug == "not-found"


def test_the_retention_setting() -> None:
    assert Settings().webhook_payload_retention == 30
    assert Settings().payload_retention_seconds == RETENTION
    assert Settings(webhook_payload_retention=0.5).payload_retention_seconds == 43_200
    for bad in (0, -1, float("inf"), "soon"):
        with pytest.raises(ValidationError):
            Settings(webhook_payload_retention=bad)
