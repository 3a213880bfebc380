"""Broker consumers on the real RabbitMQ and NATS, into a database inbox (SQLite, PostgreSQL):
each event handled once whatever the transport and however often it arrives; forged messages
rejected; a message whose handler gave up, or whose event another consumer holds, delivered again
until it is handled; consumers that ride out a broker going away."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest

from broker_support import (
    NATS_URL,
    RABBITMQ_URL,
    CountingInbox,
    Event,
    NatsServer,
    Proxy,
    consumer_settled,
    event,
    nats_stream,
    queue_messages,
    rabbitmq_exchange,
    running,
    unique,
)
from ustun.http.signature import Secret, headers
from ustun.store import Database
from ustun.webhooks.brokers import Brokers, Destination
from ustun.webhooks.brokers.destinations import NATS, RABBITMQ
from ustun.webhooks.receiving import consumers
from ustun.webhooks.receiving.consumers import consume_nats, consume_rabbitmq
from ustun.webhooks.receiving.handlers import Handlers
from ustun.webhooks.receiving.inbox import DatabaseInbox, Inbox, MemoryInbox
from ustun.webhooks.receiving.receiver import WebhookReceiver
from webhook_support import until

SECRET = Secret.generate()


async def publish_all(destination: Destination, events: list[Event]) -> None:
    async with Brokers(timeout=5, allow_private=True) as brokers:
        for sent in events:
            got = await brokers.publish(destination, *sent.args())
            assert got.ok, got


Consume = Coroutine[Any, Any, None]


@dataclass
class Setup:
    """A destination on one broker, its consumer, and whether it has nothing left to deliver."""

    destination: Destination
    consumer: Callable[..., Consume]  # (inbox, handlers, **options)
    settled: Callable[[], Awaitable[bool]]


@contextlib.asynccontextmanager
async def rabbitmq_setup() -> AsyncIterator[Setup]:
    async with rabbitmq_exchange() as exchange:

        def consumer(inbox: CountingInbox, handlers: Handlers, **options: Any) -> Consume:
            return consume_rabbitmq(RABBITMQ_URL, exchange.queue, inbox, handlers, **options)

        async def settled() -> bool:
            return await queue_messages(exchange.queue) == 0

        yield Setup(Destination(RABBITMQ, RABBITMQ_URL, exchange.name), consumer, settled)


@contextlib.asynccontextmanager
async def nats_setup() -> AsyncIterator[Setup]:
    async with nats_stream() as (stream, subject):
        durable = unique("ustun-test-c")

        def consumer(inbox: CountingInbox, handlers: Handlers, **options: Any) -> Consume:
            return consume_nats(NATS_URL, subject, durable, inbox, handlers, **options)

        async def settled() -> bool:
            return await consumer_settled(stream, durable)

        yield Setup(Destination(NATS, NATS_URL, subject), consumer, settled)


SETUPS = {RABBITMQ: rabbitmq_setup, NATS: nats_setup}


@pytest.mark.parametrize("kind", [RABBITMQ, NATS])
async def test_each_event_is_handled_once_even_when_delivered_twice(
    kind: str, inbox: CountingInbox, handlers: Handlers, handled: Counter[str]
) -> None:
    events = [event(SECRET) for _ in range(20)]
    async with SETUPS[kind]() as setup:
        await publish_all(setup.destination, events)
        await redeliver(setup.destination, events[:5])
        async with running(setup.consumer(inbox, handlers, secret=str(SECRET))):
            await until(lambda: _ready(inbox.claims >= 25), what="25 messages taken")
            await until(lambda: _ready(len(handled) == 20), what="20 events handled")
    assert handled == dict.fromkeys((e.id for e in events), 1)


async def redeliver(destination: Destination, events: list[Event]) -> None:
    """Put a second copy of each event on the queue or stream, as a broker's redelivery or a
    retry after a lost confirm would (NATS: past its duplicate window, so under a new msg id)."""
    if destination.kind == RABBITMQ:
        await publish_all(destination, events)
        return
    client = await nats.connect(NATS_URL)
    try:
        for sent in events:
            await client.jetstream().publish(
                destination.name,
                sent.body,
                headers={**sent.headers, "Nats-Msg-Id": f"{sent.id}-again"},
            )
    finally:
        await client.close()


async def _ready(value: bool) -> bool:
    return value


async def test_one_handler_any_transport_runs_once(
    inbox: CountingInbox, handlers: Handlers, handled: Counter[str]
) -> None:
    """The same event over HTTP, RabbitMQ and NATS, into one inbox and one registry."""
    sent = event(SECRET)
    receiver = WebhookReceiver(str(SECRET), inbox=inbox, handlers=handlers)
    async with rabbitmq_setup() as rabbitmq, nats_setup() as jetstream:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=receiver), base_url="http://r"
        ) as http:
            answer = await http.post("/", content=sent.body, headers=sent.headers)
            assert answer.status_code == 204
        await receiver.drain()
        await publish_all(rabbitmq.destination, [sent])
        await publish_all(jetstream.destination, [sent])
        async with (
            running(rabbitmq.consumer(inbox, handlers, secret=str(SECRET))),
            running(jetstream.consumer(inbox, handlers, secret=str(SECRET))),
        ):
            await until(lambda: _ready(inbox.claims == 3), what="the event taken 3 times")
    assert handled == {sent.id: 1}


@pytest.mark.parametrize("kind", [RABBITMQ, NATS])
async def test_a_forged_message_is_rejected_not_handled_nor_redelivered(
    kind: str, inbox: CountingInbox, handlers: Handlers, handled: Counter[str]
) -> None:
    forged, genuine = event(Secret.generate()), event(SECRET)
    async with SETUPS[kind]() as setup:
        await publish_all(setup.destination, [forged, genuine])
        async with running(setup.consumer(inbox, handlers, secret=str(SECRET))):
            await until(lambda: _ready(genuine.id in handled), what="the genuine event")
            # A forged message handed back to the broker would be delivered again and again.
            await until(setup.settled, what="nothing waiting or unacknowledged")
    assert handled == {genuine.id: 1}
    assert inbox.claims == 1


@pytest.mark.parametrize("kind", [RABBITMQ, NATS])
async def test_a_message_with_an_absurd_timestamp_is_rejected_not_redelivered(
    kind: str, inbox: CountingInbox, handlers: Handlers, handled: Counter[str]
) -> None:
    """Signed with the right secret over a `webhook-timestamp` of 400 digits (from 309 on it
    overflowed a float, and the message was handed back as if the inbox had failed, forever):
    rejected like a forged one, while the genuine event behind it is handled."""
    sent, genuine = event(SECRET), event(SECRET)
    absurd = Event(
        sent.id, sent.type, sent.body, headers([SECRET], sent.id, sent.body, timestamp=10**400)
    )
    async with SETUPS[kind]() as setup:
        await publish_all(setup.destination, [absurd, genuine])
        async with running(setup.consumer(inbox, handlers, secret=str(SECRET))):
            await until(lambda: _ready(genuine.id in handled), what="the genuine event")
            await until(setup.settled, what="nothing waiting or unacknowledged")
    assert handled == {genuine.id: 1}
    assert inbox.claims == 1


@pytest.mark.parametrize("kind", [RABBITMQ, NATS])
async def test_without_a_secret_a_body_too_deep_to_read_is_rejected_not_redelivered(
    kind: str, inbox: CountingInbox, handlers: Handlers, handled: Counter[str]
) -> None:
    """Reading a message is the same on every delivery: JSON nested past the parser's limit
    (a `RecursionError`, not a `ValueError`) is rejected, not handed back forever."""
    deep, genuine = Event("evt_deep", "payment.succeeded", b"[" * 100_000, {}), event(SECRET)
    async with SETUPS[kind]() as setup:
        await publish_all(setup.destination, [deep, genuine])
        async with running(setup.consumer(inbox, handlers)):
            await until(lambda: _ready(genuine.id in handled), what="the genuine event")
            await until(setup.settled, what="nothing waiting or unacknowledged")
    assert handled == {genuine.id: 1}
    assert inbox.claims == 1


@pytest.mark.parametrize("kind", [RABBITMQ, NATS])
async def test_a_message_whose_handler_gave_up_comes_again_until_it_is_handled(
    kind: str, db: Database
) -> None:
    """The handler fails the event's first 2 runs (one attempt each): each time the message goes
    back to the broker and, past the inbox's lease, runs the handler again; the third run succeeds
    and the message is acknowledged. The other messages are not held up meanwhile."""
    inbox = CountingInbox(db, lease=0.3)
    flaky, others = event(SECRET), [event(SECRET) for _ in range(3)]
    runs: list[tuple[str, bool]] = []  # (event id, whether the handler succeeded), in order
    handlers = Handlers(attempts=1, backoff=0.01)

    @handlers.on("payment.*")
    async def fails_twice(got: dict[str, Any]) -> None:
        fails = got["id"] == flaky.id and len(_runs_of(flaky, runs)) < 2
        runs.append((got["id"], not fails))
        if fails:
            raise RuntimeError("not yet")

    async with SETUPS[kind]() as setup:
        await publish_all(setup.destination, [flaky, *others])
        async with running(setup.consumer(inbox, handlers, secret=str(SECRET))):
            await until(lambda: _ready((flaky.id, True) in runs), what="the event handled at last")
            await until(setup.settled, what="nothing waiting or unacknowledged")
    assert _runs_of(flaky, runs) == [False, False, True]
    assert sorted(runs[:4]) == sorted([(flaky.id, False), *((e.id, True) for e in others)])


def _runs_of(sent: Event, runs: list[tuple[str, bool]]) -> list[bool]:
    return [succeeded for event_id, succeeded in runs if event_id == sent.id]


@pytest.mark.parametrize("kind", [RABBITMQ, NATS])
async def test_an_event_held_by_a_consumer_that_died_is_handled_after_the_lease(
    kind: str, db: Database
) -> None:
    """The event's id is claimed and not finished when its message arrives, as by a consumer
    that died mid-handler: the message is not acknowledged as a duplicate but comes again after
    the inbox's lease, when its claim has lapsed, and the handler runs then, once."""
    inbox = CountingInbox(db, lease=0.3)
    sent = event(SECRET)
    runs: list[float] = []  # when the handler ran (`time.monotonic()`)
    handlers = Handlers(attempts=1)

    @handlers.on("payment.*")
    async def record(_: dict[str, Any]) -> None:
        runs.append(time.monotonic())

    async with SETUPS[kind]() as setup:
        await publish_all(setup.destination, [sent])
        await inbox.prepare()
        claimed_at = time.monotonic()
        assert await inbox.claim(sent.id, sent.type)  # the consumer that died
        async with running(setup.consumer(inbox, handlers, secret=str(SECRET))):
            await until(lambda: _ready(len(runs) == 1), what="the event handled")
            await until(setup.settled, what="nothing waiting or unacknowledged")
    assert len(runs) == 1
    assert runs[0] - claimed_at >= inbox.lease
    # Taken while the claim held (refused), then once it had lapsed.
    assert inbox.claims == 3


async def test_the_memory_inbox_tells_a_handled_id_from_a_claimed_one() -> None:
    await _handled_only_once_done(MemoryInbox())


async def test_the_database_inbox_tells_a_handled_id_from_a_claimed_one(db: Database) -> None:
    inbox = DatabaseInbox(db)
    await inbox.prepare()
    await _handled_only_once_done(inbox)


async def _handled_only_once_done(inbox: Inbox) -> None:
    """`handled` is false for an unknown id, a claimed one and one whose handler gave up; true
    once the handler finished, for that id only."""
    event_id, other = unique("evt"), unique("evt")
    assert not await inbox.handled(event_id)
    assert await inbox.claim(event_id, "payment.succeeded")
    assert not await inbox.handled(event_id)
    await inbox.failed(event_id, "RuntimeError: not yet")
    assert not await inbox.handled(event_id)
    await inbox.done(event_id)
    assert await inbox.handled(event_id)
    assert not await inbox.handled(other)


async def test_the_nats_consumer_outlives_fetches_that_time_out(
    monkeypatch: pytest.MonkeyPatch,
    inbox: CountingInbox,
    handlers: Handlers,
    handled: Counter[str],
) -> None:
    """With a fetch wait this short, nats-py's fetch times out on every path, including the one
    that raises asyncio's own `TimeoutError` rather than nats-py's: the consumer keeps fetching
    and takes what is published while it runs."""
    monkeypatch.setattr(consumers, "FETCH_WAIT", 0.001)
    sent = event(SECRET)
    async with (
        nats_setup() as setup,
        running(setup.consumer(inbox, handlers, secret=str(SECRET))),
    ):
        for _ in range(50):  # 50 empty fetches, each one timing out
            await asyncio.sleep(0.002)
        await publish_all(setup.destination, [sent])
        await until(lambda: _ready(sent.id in handled), what="the event handled")
    assert handled == {sent.id: 1}


async def test_without_a_secret_the_event_id_comes_from_the_message(
    inbox: CountingInbox, handlers: Handlers, handled: Counter[str]
) -> None:
    sent = event(SECRET)
    async with nats_setup() as setup:
        await publish_all(setup.destination, [sent])
        await redeliver(setup.destination, [sent])
        async with running(setup.consumer(inbox, handlers)):
            await until(
                lambda: _ready(inbox.claims == 2 and sent.id in handled), what="both copies taken"
            )
    assert handled == {sent.id: 1}


async def test_the_nats_consumer_rides_out_a_server_restart(
    tmp_path: Path, inbox: CountingInbox, handlers: Handlers, handled: Counter[str]
) -> None:
    server = await NatsServer(tmp_path).start()
    events = [event(SECRET) for _ in range(6)]
    try:
        async with nats_stream(server.url) as (_, subject):
            destination = Destination(NATS, server.url, subject)
            consumer = consume_nats(
                server.url, subject, unique("ustun-test-c"), inbox, handlers, secret=SECRET
            )
            async with running(consumer):
                await publish_all(destination, events[:3])
                await until(lambda: _ready(len(handled) == 3), what="the first 3 events")
                await server.stop()
                await server.start()
                await publish_all(destination, events[3:])
                await until(lambda: _ready(len(handled) == 6), what="all 6 events", within=30)
    finally:
        await server.stop()
    assert handled == dict.fromkeys((e.id for e in events), 1)


async def test_the_rabbitmq_consumer_rides_out_a_lost_connection(
    inbox: CountingInbox, handlers: Handlers, handled: Counter[str]
) -> None:
    """The consumer reaches RabbitMQ through a proxy that the test cuts and restores."""
    events = [event(SECRET) for _ in range(6)]
    async with Proxy(5672) as proxy, rabbitmq_exchange() as exchange:
        destination = Destination(RABBITMQ, RABBITMQ_URL, exchange.name)
        consumer = consume_rabbitmq(proxy.url(), exchange.queue, inbox, handlers, secret=SECRET)
        async with running(consumer):
            await publish_all(destination, events[:3])
            await until(lambda: _ready(len(handled) == 3), what="the first 3 events")
            await proxy.cut()
            await publish_all(destination, events[3:])
            await proxy.start()
            await until(lambda: _ready(len(handled) == 6), what="all 6 events", within=30)
            await until(lambda: _settled_queue(exchange.queue), what="every message acknowledged")
    assert handled == dict.fromkeys((e.id for e in events), 1)


async def _settled_queue(queue: str) -> bool:
    return await queue_messages(queue) == 0
