"""Events/s published through ustun's broker transport vs a bare publish loop of the same client.

For RabbitMQ (aio-pika, publisher confirms, persistent) and NATS JetStream (nats-py, PubAck),
side by side in one run: interleaved rounds of N events each, with the same number of publishes
in flight (`--window`, the dispatcher's default per-endpoint cap is 8). The bare loop is the
ceiling: the library's own publish call with the same body and headers, nothing else. ustun's
round goes through `Brokers.publish` (connection pool, URL vetting, message building, outcome).
Both carry the same precomputed Standard Webhooks headers (signing is the dispatcher's cost,
measured by `webhook_costs.py`). Also printed: this process's CPU µs per message.

Needs the machine's RabbitMQ (5672) and NATS with JetStream (4222).

    .venv/bin/python benchmarks/brokers.py [--rounds 5] [-n 2000] [--window 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import aio_pika
import nats
from nats.aio.client import Client as NatsClient
from nats.js.api import StreamConfig

from ustun.http.signature import Secret
from ustun.http.signature import headers as signed_headers
from ustun.webhooks.brokers import Brokers, Destination
from ustun.webhooks.brokers.destinations import NATS, RABBITMQ
from ustun.webhooks.sending import message

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"
NATS_URL = "nats://127.0.0.1:4222"
EVENT_TYPE = "payment.succeeded"
SECRET = Secret.generate()

Publish = Callable[[str, bytes, dict[str, str]], Awaitable[object]]


@dataclass
class Round:
    seconds: float
    cpu: float

    def rate(self, n: int) -> float:
        return n / self.seconds


def events(n: int) -> list[tuple[str, bytes, dict[str, str]]]:
    """N events with unique ids (JetStream would drop a repeated id), signed once, up front."""
    made = []
    for _ in range(n):
        event_id = f"evt_{uuid.uuid4().hex}"
        body = message.body(event_id, EVENT_TYPE, datetime.now(UTC), {"id": "pay_1", "amount": 1})
        made.append((event_id, body, signed_headers([SECRET], event_id, body)))
    return made


async def timed(
    publish: Publish, batch: list[tuple[str, bytes, dict[str, str]]], window: int
) -> Round:
    """Publish `batch` with at most `window` in flight; wall and CPU seconds."""
    gate = asyncio.Semaphore(window)

    async def one(event_id: str, body: bytes, headers: dict[str, str]) -> None:
        async with gate:
            await publish(event_id, body, headers)

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(*e) for e in batch))
    return Round(time.perf_counter() - wall, time.process_time() - cpu)


@dataclass
class Stage:
    """A broker target of one run's own: its exchange or subject, the bare loop's publish (the
    client library's confirmed publish, nothing else), and how to empty what it received."""

    name: str
    bare: Publish
    purge: Callable[[], Awaitable[object]]


@contextlib.asynccontextmanager
async def rabbitmq_stage() -> AsyncIterator[tuple[Stage, aio_pika.abc.AbstractQueue]]:
    """A topic exchange with a durable queue bound to everything; the stage and the queue."""
    connection = await aio_pika.connect(RABBITMQ_URL)
    async with connection:
        admin = await connection.channel()
        name = f"ustun-bench-{uuid.uuid4().hex[:8]}"
        exchange = await admin.declare_exchange(name, aio_pika.ExchangeType.TOPIC, durable=True)
        queue = await admin.declare_queue(name, durable=True)
        await queue.bind(exchange, "#")
        confirming = await connection.channel(publisher_confirms=True)
        target = await confirming.get_exchange(name, ensure=False)

        async def bare(event_id: str, body: bytes, headers: dict[str, str]) -> object:
            sent = aio_pika.Message(
                body,
                headers=dict(headers),
                content_type="application/json",
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                message_id=event_id,
                type=EVENT_TYPE,
            )
            return await target.publish(sent, EVENT_TYPE, mandatory=False)

        try:
            yield Stage(name, bare, queue.purge), queue
        finally:
            await queue.delete(if_unused=False, if_empty=False)
            await exchange.delete()


@contextlib.asynccontextmanager
async def jetstream_stage() -> AsyncIterator[tuple[Stage, NatsClient]]:
    """A JetStream stream on one subject of its own; the stage (named by the subject) and the
    connection."""
    client = await nats.connect(NATS_URL)
    js = client.jetstream()
    name = f"USTUN_BENCH_{uuid.uuid4().hex[:8]}"
    subject = f"ustun.bench.{name}"
    await js.add_stream(StreamConfig(name=name, subjects=[subject]))

    async def bare(event_id: str, body: bytes, headers: dict[str, str]) -> object:
        return await js.publish(subject, body, headers={**headers, "Nats-Msg-Id": event_id})

    async def purge() -> object:
        return await js.purge_stream(name)

    try:
        yield Stage(subject, bare, purge), client
    finally:
        await js.delete_stream(name)
        await client.close()


def through(brokers: Brokers, destination: Destination) -> Publish:
    """ustun's side of a round: `Brokers.publish` to `destination`, which must confirm."""

    async def publish(event_id: str, body: bytes, headers: dict[str, str]) -> object:
        got = await brokers.publish(destination, EVENT_TYPE, event_id, body, headers)
        assert got.ok, got
        return got

    return publish


async def rabbitmq(args: argparse.Namespace) -> tuple[list[Round], list[Round]]:
    async with rabbitmq_stage() as (stage, _), Brokers(timeout=10, allow_private=True) as brokers:
        ustun = through(brokers, Destination(RABBITMQ, RABBITMQ_URL, stage.name))
        return await rounds(args, stage.bare, ustun, stage.purge)


async def jetstream(args: argparse.Namespace) -> tuple[list[Round], list[Round]]:
    async with jetstream_stage() as (stage, _), Brokers(timeout=10, allow_private=True) as brokers:
        ustun = through(brokers, Destination(NATS, NATS_URL, stage.name))
        return await rounds(args, stage.bare, ustun, stage.purge)


async def rounds(
    args: argparse.Namespace,
    bare: Publish,
    ustun: Publish,
    purge: Callable[[], Awaitable[object]],
) -> tuple[list[Round], list[Round]]:
    """Warm both up, then alternate bare and ustun rounds (the order flips every round)."""
    await timed(bare, events(50), args.window)
    await timed(ustun, events(50), args.window)
    bare_rounds, ustun_rounds = [], []
    for index in range(args.rounds):
        order = [(bare, bare_rounds), (ustun, ustun_rounds)]
        for publish, into in order if index % 2 == 0 else reversed(order):
            await purge()
            into.append(await timed(publish, events(args.n), args.window))
    await purge()
    return bare_rounds, ustun_rounds


def report(label: str, n: int, bare: list[Round], ustun: list[Round]) -> None:
    bare_rate = statistics.median(r.rate(n) for r in bare)
    ustun_rate = statistics.median(r.rate(n) for r in ustun)
    ratios = [u.rate(n) / b.rate(n) for b, u in zip(bare, ustun, strict=True)]
    bare_cpu = statistics.median(r.cpu / n * 1e6 for r in bare)
    ustun_cpu = statistics.median(r.cpu / n * 1e6 for r in ustun)
    print(
        f"{label:<10} bare {bare_rate:8.0f} ev/s {bare_cpu:6.0f} µs CPU/msg | "
        f"ustun {ustun_rate:8.0f} ev/s {ustun_cpu:6.0f} µs CPU/msg | "
        f"ratio {statistics.median(ratios):.2f}x (rounds {min(ratios):.2f}-{max(ratios):.2f})"
    )


async def main(args: argparse.Namespace) -> None:
    print(f"{args.rounds} rounds x {args.n} events, {args.window} in flight; medians")
    report("RabbitMQ", args.n, *await rabbitmq(args))
    report("NATS", args.n, *await jetstream(args))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--window", type=int, default=8)
    asyncio.run(main(parser.parse_args()))
