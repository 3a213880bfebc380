"""Events/s relayed to a broker by ONE `ustun worker` against a bare publish loop, and latency.

For RabbitMQ and NATS JetStream, side by side in one run, each on a fresh PostgreSQL database
with a worker of its own:

1. Throughput: N events committed at once to the outbox with the worker idle; the worker
   claims, signs and publishes them (confirms / PubAcks awaited) and records every attempt.
   Interleaved with rounds of the bare loop of `brokers.py` (the same client library's publish,
   same body and headers, as many in flight as the endpoint's `max_in_flight`): the ceiling.
2. Latency: events committed one per transaction at `--rate`/s; commit → arrival at a consumer
   subscribed on the broker (a queue bound to the exchange; a subscription on the subject).

Needs PostgreSQL (`USTUN_BENCH_PG`), RabbitMQ (5672) and NATS with JetStream (4222).

    .venv/bin/python benchmarks/broker_relay.py [--rounds 3] [-n 5000] [--rate 200] [--seconds 10]
        [--in-flight 256] [--brokers rabbitmq nats]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aio_pika

from brokers import (
    EVENT_TYPE,
    NATS_URL,
    RABBITMQ_URL,
    Publish,
    events,
    jetstream_stage,
    rabbitmq_stage,
    timed,
)
from jobs import backend_cpu, cpu_seconds
from ustun.service.plumbing.accounts import account_for_key, create_key
from ustun.store import Database
from ustun.store.migrate import upgrade
from ustun.webhooks import endpoints as ops
from ustun.webhooks.brokers.destinations import NATS, RABBITMQ
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending.outbox import emit
from webhooks import SECRET_KEY, drained, drop_pg, pg_database


@dataclass
class Arrivals:
    """Arrival times by event id; `complete` is set once every `expect`ed id has arrived."""

    times: dict[str, float] = field(default_factory=dict)
    awaited: set[str] = field(default_factory=set)
    complete: asyncio.Event = field(default_factory=asyncio.Event)

    def record(self, event_id: str) -> None:
        self.times[event_id] = time.time()
        self._check()

    def expect(self, event_ids: set[str]) -> None:
        self.awaited = event_ids
        self._check()

    def _check(self) -> None:
        if self.awaited and self.awaited <= self.times.keys():
            self.complete.set()


@dataclass
class Target:
    """A broker destination of this run, the bare loop's publish, and how to empty and read it."""

    kind: str
    url: str
    name: str
    # The broker server's process name (its CPU is counted on both sides).
    server: str
    bare: Publish
    purge: Callable[[], Awaitable[object]]
    # listen(arrivals): an async context recording arrival times by event id while open.
    listen: Callable[[Arrivals], contextlib.AbstractAsyncContextManager[None]]


@contextlib.asynccontextmanager
async def rabbitmq() -> AsyncIterator[Target]:
    async with rabbitmq_stage() as (stage, queue):

        @contextlib.asynccontextmanager
        async def listen(arrivals: Arrivals) -> AsyncIterator[None]:
            async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                arrivals.record(message.message_id or "")
                await message.ack()

            tag = await queue.consume(on_message)
            try:
                yield
            finally:
                await queue.cancel(tag)

        yield Target(
            RABBITMQ, RABBITMQ_URL, stage.name, "beam.smp", stage.bare, stage.purge, listen
        )


@contextlib.asynccontextmanager
async def jetstream() -> AsyncIterator[Target]:
    async with jetstream_stage() as (stage, client):

        @contextlib.asynccontextmanager
        async def listen(arrivals: Arrivals) -> AsyncIterator[None]:
            async def on_message(message: Any) -> None:
                arrivals.record((message.headers or {}).get("Nats-Msg-Id", ""))

            subscription = await client.subscribe(stage.name, cb=on_message)
            try:
                yield
            finally:
                await subscription.unsubscribe()

        yield Target(NATS, NATS_URL, stage.name, "nats-server", stage.bare, stage.purge, listen)


BROKERS = {"RabbitMQ": rabbitmq, "NATS": jetstream}


async def endpoint(db: Database, target: Target, in_flight: int) -> str:
    """A fresh account with one endpoint on `target`; the account id."""
    account = await account_for_key(db, await create_key(db, f"bench-{uuid.uuid4().hex[:8]}"))
    assert account is not None
    async with db.unit_of_work() as uow:
        await ops.create(
            uow,
            SecretBox(SECRET_KEY),
            account.id,
            url=target.url,
            events=["*"],
            kind=target.kind,
            destination=target.name,
            max_in_flight=in_flight,
        )
    return account.id


@dataclass
class Costs:
    """CPU µs per event of each process of one side: the publisher, PostgreSQL, the broker."""

    publisher: float = 0.0
    postgresql: float = 0.0
    broker: float = 0.0

    def __str__(self) -> str:
        total = self.publisher + self.postgresql + self.broker
        return (
            f"{self.publisher:4.0f} + PG {self.postgresql:3.0f} + broker {self.broker:3.0f}"
            f" = {total:4.0f}"
        )


def server_pids(name: str) -> list[int]:
    """The pids of the processes called `name` (the broker server)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == name:
                    found.append(int(entry.name))
    return found


def cpu_of(pids: list[int]) -> float:
    """CPU seconds so far of the processes in `pids`."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):  # the process exited meanwhile
            total += cpu_seconds(pid)
    return total


async def relayed(
    db: Database, account_id: str, n: int, worker_pid: int, broker_pids: list[int]
) -> tuple[float, Costs]:
    """Commit N events at once; events/s from the commit until the worker has sent them all,
    and CPU µs per event of the worker, the database's backends and the broker."""
    async with db.unit_of_work() as uow:
        for i in range(n):
            await emit(uow, account_id, EVENT_TYPE, {"id": f"pay_{i}", "amount": i})
    committed = time.perf_counter()
    worker_cpu, broker_cpu = cpu_seconds(worker_pid), cpu_of(broker_pids)
    backends = await backend_cpu(db.engine.url.database)
    await drained(db, every=0.01)  # a round lasts about a second: 50 ms would be 5 % of it
    elapsed = time.perf_counter() - committed
    database = sum(
        seconds - backends.get(pid, 0.0)
        for pid, seconds in (await backend_cpu(db.engine.url.database)).items()
    )
    costs = Costs(
        (cpu_seconds(worker_pid) - worker_cpu) / n * 1e6,
        database / n * 1e6,
        (cpu_of(broker_pids) - broker_cpu) / n * 1e6,
    )
    return n / elapsed, costs


async def bare_round(
    target: Target, n: int, in_flight: int, broker_pids: list[int]
) -> tuple[float, Costs]:
    """One round of the bare loop: events/s, and CPU µs per event of this process and the broker."""
    batch = events(n)
    broker_cpu = cpu_of(broker_pids)
    round_ = await timed(target.bare, batch, in_flight)
    costs = Costs(round_.cpu / n * 1e6, 0.0, (cpu_of(broker_pids) - broker_cpu) / n * 1e6)
    return n / round_.seconds, costs


async def latency(
    db: Database, account_id: str, target: Target, rate: float, seconds: float
) -> tuple[float, float, int]:
    """Commit one event per transaction at `rate`/s; p50 and p99 of commit → consumer, ms."""
    arrivals = Arrivals()
    committed: dict[str, float] = {}
    async with target.listen(arrivals):
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
            async with db.unit_of_work() as uow:
                event_id = await emit(uow, account_id, EVENT_TYPE, {"id": f"pay_l{i}"})
            committed[event_id] = time.time()
        arrivals.expect(set(committed))
        with contextlib.suppress(TimeoutError):  # a lost event shows as fewer samples
            await asyncio.wait_for(arrivals.complete.wait(), 30)
    got = arrivals.times
    samples = sorted((got[e] - t) * 1000 for e, t in committed.items() if e in got)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return statistics.median(samples), p99, len(samples)


def worker(database_url: str) -> subprocess.Popen[bytes]:
    """One `ustun worker` process on the database."""
    env = {
        **os.environ,
        "USTUN_DATABASE_URL": database_url,
        "USTUN_SECRET_KEY": SECRET_KEY,
        "USTUN_WEBHOOK_ALLOW_PRIVATE": "1",
        "USTUN_LOG_LEVEL": "warning",
    }
    return subprocess.Popen([str(Path(sys.executable).with_name("ustun")), "worker"], env=env)


@dataclass
class Measured:
    """Per round: events/s and CPU µs per event of the bare loop and of the relay; latency."""

    bare: list[tuple[float, Costs]]
    relay: list[tuple[float, Costs]]
    latency: tuple[float, float, int]


def median_costs(rounds: list[tuple[float, Costs]]) -> Costs:
    """Each process's median CPU µs per event over the rounds."""
    costs = [c for _, c in rounds]
    return Costs(
        statistics.median(c.publisher for c in costs),
        statistics.median(c.postgresql for c in costs),
        statistics.median(c.broker for c in costs),
    )


async def measure(
    db: Database, target: Target, args: argparse.Namespace, worker_pid: int
) -> Measured:
    """Alternate bare and relayed rounds; then the latency run."""
    account_id = await endpoint(db, target, args.in_flight)
    broker = server_pids(target.server)
    await relayed(db, account_id, 100, worker_pid, broker)  # warm up: connection, endpoint cached
    bare, relay = [], []
    for _ in range(args.rounds):
        await target.purge()
        bare.append(await bare_round(target, args.n, args.in_flight, broker))
        await target.purge()
        relay.append(await relayed(db, account_id, args.n, worker_pid, broker))
    await target.purge()
    return Measured(bare, relay, await latency(db, account_id, target, args.rate, args.seconds))


@contextlib.asynccontextmanager
async def fresh_worker() -> AsyncIterator[tuple[Database, int]]:
    """A fresh PostgreSQL database and one `ustun worker` on it, dropped afterwards: each broker
    starts from empty tables (the other's settled rows and their vacuum are not billed to it)."""
    pg_name, url = await pg_database()
    db = Database(url)
    process = None
    try:
        await upgrade(db)
        process = worker(url)
        await asyncio.sleep(2.0)  # let the worker start and LISTEN
        yield db, process.pid
    finally:
        if process is not None:
            process.terminate()
            process.wait(30)
        await db.dispose()
        await drop_pg(pg_name)


async def main(args: argparse.Namespace) -> None:
    print(
        f"{args.rounds} rounds x {args.n} events, {args.in_flight} in flight, one worker; "
        f"latency at {args.rate:.0f} events/s for {args.seconds:.0f} s"
    )
    for label, opened in BROKERS.items():
        if label.lower() not in args.brokers:
            continue
        async with fresh_worker() as (db, worker_pid), opened() as target:
            got = await measure(db, target, args, worker_pid)
        bare, relay = [r for r, _ in got.bare], [r for r, _ in got.relay]
        ratios = [r / b for b, r in zip(bare, relay, strict=True)]
        p50, p99, count = got.latency
        print(
            f"{label:<9} bare {statistics.median(bare):7.0f} ev/s | relayed "
            f"{statistics.median(relay):7.0f} ev/s | ratio {statistics.median(ratios):.2f}x "
            f"({min(ratios):.2f}-{max(ratios):.2f}) | commit → consumer p50 {p50:.1f} ms, "
            f"p99 {p99:.1f} ms ({count} events)\n"
            f"{'':<9} CPU µs/event, bare: loop {median_costs(got.bare)}"
            f" | relayed: worker {median_costs(got.relay)}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--in-flight", type=int, default=256, help="the endpoint's max_in_flight = the bare window"
    )
    parser.add_argument(
        "--brokers", nargs="+", default=["rabbitmq", "nats"], choices=["rabbitmq", "nats"]
    )
    asyncio.run(main(parser.parse_args()))
