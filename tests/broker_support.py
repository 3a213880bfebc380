"""Broker test helpers: throwaway exchanges, queues and streams on the machine's RabbitMQ and
NATS, a NATS server of a test's own (to stop and restart), and a TCP proxy that can cut a
client off RabbitMQ without stopping the broker others use."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import uuid
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aio_pika
import nats
from nats.js.api import StreamConfig

from support import free_port
from ustun.http.signature import Secret, headers
from ustun.webhooks.receiving.inbox import DatabaseInbox
from ustun.webhooks.sending import message

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"
NATS_URL = "nats://127.0.0.1:4222"


def unique(prefix: str) -> str:
    """A name no other test (or person) on this machine uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class CountingInbox(DatabaseInbox):
    """A database inbox that counts the claims made on it (one per message taken)."""

    claims = 0

    async def claim(self, webhook_id: str, event_type: str) -> bool:
        self.claims += 1
        return await super().claim(webhook_id, event_type)


@contextlib.asynccontextmanager
async def running(consumer: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """Run a consumer for the body of the `async with`; it must end only by cancellation."""
    task = asyncio.create_task(consumer)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert task.cancelled(), task.exception()


@dataclass(frozen=True)
class Event:
    """One signed event as the dispatcher would hand it to a transport."""

    id: str
    type: str
    body: bytes
    headers: dict[str, str]

    def args(self) -> tuple[str, str, bytes, dict[str, str]]:
        """What `Brokers.publish` takes after the destination."""
        return self.type, self.id, self.body, self.headers


def event(secret: Secret, event_type: str = "payment.succeeded", event_id: str = "") -> Event:
    event_id = event_id or f"evt_{uuid.uuid4().hex}"
    body = message.body(event_id, event_type, datetime.now(UTC), {"id": "pay_1", "amount": 100})
    return Event(event_id, event_type, body, headers([secret], event_id, body))


@dataclass
class Exchange:
    """A durable topic exchange with one durable queue bound to every routing key."""

    name: str
    queue: str


@contextlib.asynccontextmanager
async def rabbitmq_exchange(
    url: str = RABBITMQ_URL, max_length: int | None = None
) -> AsyncIterator[Exchange]:
    """`max_length`: a queue that refuses (nacks) what would exceed it."""
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        name, queue_name = unique("ustun-test-x"), unique("ustun-test-q")
        exchange = await channel.declare_exchange(name, aio_pika.ExchangeType.TOPIC, durable=True)
        limit = {"x-max-length": max_length, "x-overflow": "reject-publish"}
        queue = await channel.declare_queue(
            queue_name, durable=True, arguments=None if max_length is None else limit
        )
        await queue.bind(exchange, "#")
        try:
            yield Exchange(name, queue_name)
        finally:
            await queue.delete(if_unused=False, if_empty=False)
            await exchange.delete()


async def drain_queue(queue_name: str, url: str = RABBITMQ_URL) -> list[aio_pika.IncomingMessage]:
    """Every message waiting in the queue, acknowledged."""
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.get_queue(queue_name)
        got = []
        while (incoming := await queue.get(fail=False)) is not None:
            await incoming.ack()
            got.append(incoming)
        return got


async def queue_messages(queue_name: str) -> int:
    """Messages in the queue, ready or delivered and not yet acknowledged (`rabbitmqctl`)."""
    listing = await asyncio.create_subprocess_exec(
        *("rabbitmqctl", "-q", "list_queues", "--no-table-headers", "name", "messages"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await listing.communicate()
    for line in out.decode().splitlines():
        name, _, count = line.partition("\t")
        if name == queue_name:
            return int(count)
    raise AssertionError(f"no queue {queue_name}")


async def consumer_settled(stream: str, durable: str, url: str = NATS_URL) -> bool:
    """Whether a JetStream consumer has nothing left to deliver and nothing unacknowledged."""
    client = await nats.connect(url)
    try:
        info = await client.jetstream().consumer_info(stream, durable)
        return info.num_pending == 0 and info.num_ack_pending == 0
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def nats_stream(url: str = NATS_URL, subject: str = "") -> AsyncIterator[tuple[str, str]]:
    """A JetStream stream of its own and the one subject it takes (`subject`, else a new one):
    `(stream, subject)`."""
    client = await nats.connect(url)
    stream, subject = unique("USTUN_TEST").replace("-", "_"), subject or unique("ustun.test")
    try:
        await client.jetstream().add_stream(StreamConfig(name=stream, subjects=[subject]))
        yield stream, subject
    finally:
        with contextlib.suppress(Exception):
            await client.jetstream().delete_stream(stream)
        await client.close()


async def stream_messages(
    stream: str, subject: str, url: str = NATS_URL
) -> list[dict[str, object]]:
    """Every message in the stream: its headers and decoded body, in order."""
    client = await nats.connect(url)
    try:
        js = client.jetstream()
        info = await js.stream_info(stream)
        got = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            raw = await js.get_msg(stream, seq)
            got.append({"headers": raw.headers or {}, "body": json.loads(raw.data or b"{}")})
        return got
    finally:
        await client.close()


@dataclass
class NatsServer:
    """`nats-server -js` on a free port with its own store, started and stopped by a test."""

    store: Path
    port: int = field(default_factory=free_port)
    process: asyncio.subprocess.Process | None = None
    # More `nats-server` arguments, e.g. `("-c", "nats.conf")`.
    extra: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> NatsServer:
        self.process = await asyncio.create_subprocess_exec(
            *(
                "nats-server",
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-js",
                "-sd",
                str(self.store),
                *self.extra,
            ),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        deadline = asyncio.get_running_loop().time() + 15
        while True:
            with contextlib.suppress(OSError):
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                info = await reader.readline()
                writer.close()
                if b'"jetstream":true' in info:
                    return self
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"nats-server did not start on port {self.port}")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            await asyncio.wait_for(self.process.wait(), 10)
            self.process = None


class Proxy:
    """A TCP proxy to a broker on a free port (a TLS one, given `tls`): `cut()` drops every
    connection and refuses new ones (the broker looks down to its clients), `start()` lets them
    through again, `freeze()` keeps the connections open but passes nothing more (a broker that
    stopped answering)."""

    def __init__(self, target_port: int, *, tls: ssl.SSLContext | None = None) -> None:
        self.target_port = target_port
        # Given, the proxy speaks TLS to its clients (and plain TCP to the broker): a TLS port.
        self.tls = tls
        self.port = free_port()
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()

    def url(self, scheme: str = "amqp", userinfo: str = "guest:guest@") -> str:
        return f"{scheme}://{userinfo}127.0.0.1:{self.port}/"

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, ssl=self.tls)
        return self

    async def __aenter__(self) -> Proxy:
        return await self.start()

    async def __aexit__(self, *_: object) -> None:
        await self.cut()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        pipes = [
            asyncio.create_task(_pipe(reader, up_writer, self._flowing)),
            asyncio.create_task(_pipe(up_reader, writer, self._flowing)),
        ]
        self._pipes.update(pipes)
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pipe in pipes:
                pipe.cancel()
                self._pipes.discard(pipe)
            for w in (writer, up_writer):
                w.close()

    def freeze(self) -> None:
        self._flowing.clear()

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.sleep(0)


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flowing: asyncio.Event
) -> None:
    while data := await reader.read(65536):
        await flowing.wait()
        writer.write(data)
        await writer.drain()
