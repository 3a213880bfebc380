"""The dispatcher against real local receivers, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import timedelta
from typing import Any

import asyncpg
from aiohttp import web
from sqlalchemy import select

from support import in_background, new_account
from ustun import clock
from ustun.store import Database
from ustun.webhooks import endpoints as ops
from ustun.webhooks import verify
from ustun.webhooks.adapters import for_database
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending.dispatcher import DispatchConfig, Dispatcher
from ustun.webhooks.sending.outbox import emit
from ustun.webhooks.tables import deliveries, endpoints, events
from webhook_support import (
    PUBLIC_URL,
    SCHEDULE,
    MakeEndpoint,
    Receiver,
    attempts_of,
    delivery_of,
    hold,
    send,
    settled,
    status,
    until,
)


async def test_signed_delivery_verifies(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    _, secret = await make_endpoint(receiver.url())
    event_id = await send(db, account_id, "payment.created", amount=100)
    await settled(db, event_id, "succeeded")
    got = receiver.received[0]
    event = verify(secret, got.headers, got.body)
    assert event["id"] == event_id == got.headers["webhook-id"]
    assert event["type"] == "payment.created"
    assert event["data"] == {"id": "pay_1", "amount": 100}
    assert got.headers["User-Agent"].startswith("ustun/")
    assert got.headers["Content-Type"] == "application/json"


async def test_fails_twice_then_succeeds_with_three_attempts(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    receiver.script["/hook"] = [status(500), status(502)]
    await make_endpoint(receiver.url())
    event_id = await send(db, account_id, "payment.created")
    row = await settled(db, event_id, "succeeded")
    assert row.attempt_count == 3
    tried = await attempts_of(db, row.id)
    assert [a.status_code for a in tried] == [500, 502, 200]
    assert tried[0].response == "answer 500"
    assert all(a.latency_ms > 0 for a in tried)
    assert len(receiver.bodies()) == 3
    assert len({r.headers["webhook-id"] for r in receiver.received}) == 1


async def test_a_binary_error_body_is_recorded_and_retried(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    async def binary(_: web.Request) -> web.StreamResponse:
        return web.Response(status=500, body=b"bad\x00\xff")

    receiver.script["/hook"] = [binary]
    await make_endpoint(receiver.url())
    event_id = await send(db, account_id, "payment.created")
    row = await settled(db, event_id, "succeeded")
    tried = await attempts_of(db, row.id)
    assert [(a.status_code, a.response) for a in tried] == [(500, "bad\ufffd\ufffd"), (200, "ok")]


async def test_receiver_down_then_up_loses_nothing(
    db: Database,
    box: SecretBox,
    config: DispatchConfig,
    account_id: str,
    make_endpoint: MakeEndpoint,
) -> None:
    # Retries every 0.5 s for 15 s: on a loaded machine the receiver may come up seconds after
    # the first failures, and the compressed SCHEDULE would have dead-lettered them by then.
    patient = dataclasses.replace(config, retry_schedule=(0.5,) * 30)
    down = Receiver()
    await make_endpoint(down.url())
    sent = [await send(db, account_id, "payment.created", n=i) for i in range(20)]

    async def all_tried() -> bool:
        rows = [await delivery_of(db, e) for e in sent]
        return all(r.attempt_count >= 1 for r in rows)

    async with in_background(Dispatcher(db, box, patient)):
        await until(all_tried, what="every delivery to fail once")
        await down.start()
        try:
            for event_id in sent:
                await settled(db, event_id, "succeeded")
            got = {json.loads(b)["id"] for b in down.bodies()}
            assert got == set(sent)
        finally:
            await down.stop()


async def test_last_retry_failing_makes_it_dead(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    receiver.script["/hook"] = [status(500)] * (len(SCHEDULE) + 1)
    await make_endpoint(receiver.url())
    event_id = await send(db, account_id, "payment.created")
    row = await settled(db, event_id, "dead")
    assert row.attempt_count == len(SCHEDULE) + 1
    assert row.next_attempt_at is None


async def test_410_disables_the_endpoint_and_logs_it(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    receiver.script["/hook"] = [status(410)]
    endpoint_id, _ = await make_endpoint(receiver.url(), ("payment.*",))
    event_id = await send(db, account_id, "payment.created")
    row = await settled(db, event_id, "dead")
    assert row.attempt_count == 1
    async with db.read() as conn:
        endpoint = (
            await conn.execute(select(endpoints).where(endpoints.c.id == endpoint_id))
        ).one()
        logged = (
            await conn.execute(
                select(events).where(
                    events.c.account_id == account_id, events.c.type == "endpoint.disabled"
                )
            )
        ).all()
    assert endpoint.enabled is False
    assert "410" in endpoint.disabled_reason
    assert [json.loads(e.data)["id"] for e in logged] == [endpoint_id]
    later = await send(db, account_id, "payment.created")
    async with db.read() as conn:
        assert not (
            await conn.execute(select(deliveries).where(deliveries.c.event_id == later))
        ).all()


async def test_429_retry_after_is_honoured_and_clamped(
    db: Database,
    account_id: str,
    box: SecretBox,
    config: DispatchConfig,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
) -> None:
    # Scheduled delay 1 s ±20 %; Retry-After 10 is clamped to 2 x 1 s, neither 1 s nor 10 s.
    receiver.script["/hook"] = [status(429, {"Retry-After": "10"})]
    await make_endpoint(receiver.url())
    async with in_background(
        Dispatcher(db, box, dataclasses.replace(config, retry_schedule=(1.0,)))
    ):
        event_id = await send(db, account_id, "payment.created")
        await settled(db, event_id, "succeeded")
    first, second = receiver.received
    assert 1.6 <= second.at - first.at < 5


async def test_429_short_retry_after_comes_back_sooner_than_the_schedule(
    db: Database,
    account_id: str,
    box: SecretBox,
    config: DispatchConfig,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
) -> None:
    receiver.script["/hook"] = [status(500), status(503, {"Retry-After": "0"})]
    await make_endpoint(receiver.url())
    # The schedule says 4 s ±20 % after the second attempt; Retry-After: 0 says now.
    patient = dataclasses.replace(config, retry_schedule=(0.2, 4.0))
    async with in_background(Dispatcher(db, box, patient)):
        event_id = await send(db, account_id, "payment.created")
        await settled(db, event_id, "succeeded")
    _, second, third = receiver.received
    assert third.at - second.at < 2


async def test_slow_endpoint_does_not_slow_another(
    db: Database,
    account_id: str,
    box: SecretBox,
    config: DispatchConfig,
    make_endpoint: MakeEndpoint,
) -> None:
    """An endpoint that hangs holds only its own eight slots; another endpoint's events flow."""
    slow, fast = Receiver(), Receiver()
    gate = asyncio.Event()
    await slow.start()
    await fast.start()
    # A timeout longer than the test, so the hung requests stay in flight until released.
    patient = dataclasses.replace(config, timeout=60.0)
    try:
        async with in_background(Dispatcher(db, box, patient)):
            try:
                slow.script["/hook"] = [hold(gate)] * 40
                await make_endpoint(slow.url(), ("slow.*",))
                await make_endpoint(fast.url(), ("fast.*",))
                slow_events = [await send(db, account_id, "slow.thing", n=i) for i in range(40)]
                await until(lambda: _async(slow.in_flight == 8), what="the slow endpoint's cap")
                fast_events = [await send(db, account_id, "fast.thing", n=i) for i in range(20)]
                for event_id in fast_events:
                    await settled(db, event_id, "succeeded")
                # All of that happened while the first eight slow requests hung: no ninth was sent.
                assert (len(slow.received), slow.in_flight) == (8, 8)
                gate.set()
                for event_id in slow_events:
                    await settled(db, event_id, "succeeded")
                assert slow.most_in_flight == 8
                assert len(slow.received) == 40
            finally:
                gate.set()
    finally:
        await slow.stop()
        await fast.stop()


async def _async(value: bool) -> bool:
    return value


async def test_rate_limit_spaces_sends(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    await make_endpoint(receiver.url(), rate_limit=10.0)
    sent = [await send(db, account_id, "payment.created", n=i) for i in range(6)]
    for event_id in sent:
        await settled(db, event_id, "succeeded")
    times = sorted(r.at for r in receiver.received)
    assert times[-1] - times[0] >= 0.45  # 6 sends at 10/s span at least 5 gaps of 0.1 s


async def test_thin_payload_carries_only_id_and_url(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    await make_endpoint(receiver.url(), payload="thin")
    async with db.unit_of_work() as uow:
        event_id = await emit(
            uow,
            account_id,
            "payment.created",
            {"id": "pay_9", "amount": 5},
            object_url="/v1/payments/pay_9",
        )
    await settled(db, event_id, "succeeded")
    assert json.loads(receiver.bodies()[0])["data"] == {
        "id": "pay_9",
        "url": f"{PUBLIC_URL}/v1/payments/pay_9",
    }


async def test_thin_endpoints_get_events_about_no_object_in_full(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    endpoint_id, _ = await make_endpoint(receiver.url(), payload="thin")
    async with db.unit_of_work() as uow:
        event_id = await emit(uow, account_id, "ping", {"endpoint_id": endpoint_id})
    await settled(db, event_id, "succeeded")
    assert json.loads(receiver.bodies()[0])["data"] == {"endpoint_id": endpoint_id}


async def test_full_and_thin_endpoints_each_get_their_form_of_one_event(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    await make_endpoint(receiver.url("/full"))
    await make_endpoint(receiver.url("/thin"), payload="thin")
    async with db.unit_of_work() as uow:
        await emit(
            uow, account_id, "payment.created", {"id": "pay_9", "amount": 5}, object_url="/p"
        )

    async def both() -> bool:
        return len(receiver.received) == 2

    await until(both, what="both deliveries")
    data = {r.path: json.loads(r.body)["data"] for r in receiver.received}
    assert data == {
        "/full": {"id": "pay_9", "amount": 5},
        "/thin": {"id": "pay_9", "url": f"{PUBLIC_URL}/p"},
    }


async def test_rotation_reaches_a_dispatcher_that_already_sent_to_the_endpoint(
    db: Database,
    account_id: str,
    box: SecretBox,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    """The dispatcher keeps endpoints decrypted, but a rotation (a new version) is seen at once."""
    endpoint_id, old = await make_endpoint(receiver.url())
    await settled(db, await send(db, account_id, "payment.created"), "succeeded")
    async with db.read() as conn:
        row = (await conn.execute(select(endpoints).where(endpoints.c.id == endpoint_id))).one()
    async with db.unit_of_work() as uow:
        new = await ops.rotate(uow, box, row)
    await settled(db, await send(db, account_id, "payment.created"), "succeeded")
    got = receiver.received[1]
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    verify(old, got.headers, got.body)
    verify(str(new), got.headers, got.body)


async def test_endpoint_failing_past_the_limit_is_disabled(
    db: Database,
    account_id: str,
    box: SecretBox,
    config: DispatchConfig,
    make_endpoint: MakeEndpoint,
) -> None:
    """The 5-day rule, with the 5 days shortened to half a second."""
    down = Receiver()  # never started: every attempt fails to connect
    endpoint_id, _ = await make_endpoint(down.url())
    quick = dataclasses.replace(config, disable_after=timedelta(seconds=0.5))
    async with in_background(Dispatcher(db, box, quick)):
        await send(db, account_id, "payment.created")

        async def disabled() -> bool:
            async with db.read() as conn:
                return not await conn.scalar(
                    select(endpoints.c.enabled).where(endpoints.c.id == endpoint_id)
                )

        await until(disabled, what="the failing endpoint to be disabled")
    async with db.read() as conn:
        logged = (
            await conn.execute(
                select(events.c.data).where(
                    events.c.account_id == account_id, events.c.type == "endpoint.disabled"
                )
            )
        ).all()
    assert [json.loads(row.data)["id"] for row in logged] == [endpoint_id]


# $3 events of account $1, each with a delivery to endpoint $2 due now: what `emit` writes.
_BURST = """
WITH events AS (
    INSERT INTO webhook_events (id, account_id, type, data, created_at)
    SELECT 'evt_burst' || i, $1, 'payment.created', '{"id": "pay_' || i || '"}', now()
    FROM generate_series(1, $3) AS i
    RETURNING id
)
INSERT INTO webhook_deliveries (id, account_id, endpoint_id, event_id, status, attempt_count,
    next_attempt_at, created_at, updated_at)
SELECT 'dlv_burst' || substr(id, 10), $1, $2, id, 'pending', 0, now(), now(), now() FROM events
"""


async def _table_counters(url: str, want_updates: int) -> Any:
    """`webhook_deliveries`' access counters, once every backend that updated it has exited."""
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:

        async def flushed() -> Any:
            row = await conn.fetchrow(
                "SELECT n_tup_upd, seq_scan, seq_tup_read FROM pg_stat_user_tables"
                " WHERE relname = 'webhook_deliveries'"
            )
            return row if row["n_tup_upd"] >= want_updates else None

        return await until(flushed, what="the dispatcher's table statistics")
    finally:
        await conn.close()


async def test_a_burst_after_an_idle_start_is_claimed_and_settled_by_index(
    own_postgresql_url: str, box: SecretBox, config: DispatchConfig, receiver: Receiver
) -> None:
    """PostgreSQL: a dispatcher that first claimed on an empty table (where PostgreSQL caches a
    plan costed for a tiny table) drains a burst without reading the whole table per claim."""
    n = 10_000
    db = Database(own_postgresql_url)
    try:
        account_id = await new_account(db)
        async with db.unit_of_work() as uow:
            endpoint_id, _ = await ops.create(
                uow, box, account_id, url=receiver.url(), events=["*"]
            )
        now = clock.now()
        for _ in range(8):  # more than the 5 runs after which a generic plan may be kept
            assert not await for_database(db).claim(
                db, limit=64, now=now, lease_until=now, token="idle"
            )
        async with db.autocommit() as conn:  # the burst, written as the outbox writes it
            await conn.execute(_BURST, account_id, endpoint_id, n)
        async with in_background(Dispatcher(db, box, config)):

            async def all_arrived() -> bool:
                return len(receiver.received) >= n

            await until(all_arrived, within=60, what=f"{n} deliveries")
    finally:
        await db.dispose()  # the backends exit and publish their table statistics
    # Each delivery is updated twice: by its claim and by its settle.
    counters = await _table_counters(own_postgresql_url, want_updates=2 * n)
    # With plans kept from the empty table: 1,891 sequential scans, 18.8 million rows read.
    assert counters["seq_tup_read"] < n, dict(counters)
