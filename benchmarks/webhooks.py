"""Webhook delivery throughput and latency, measured side by side in one run.

1. Throughput: one `ustun worker` process drains N queued deliveries to a local receiver,
   against a bare aiohttp POST loop (same receiver, same concurrency, same body): the ceiling.
2. Latency: events committed at a steady rate; commit → receiver arrival, p50 / p99.

    .venv/bin/python benchmarks/webhooks.py [--backend postgresql|sqlite|both] [-n 10000]

The receiver runs in its own process (aiohttp, answers 204) and records arrival times. The
bare loop runs on uvloop when it is installed, as `ustun worker` does, so the ceiling is fair.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from sqlalchemy import select

from jobs import backend_cpu, cpu_seconds
from ustun.service.plumbing.accounts import account_for_key, create_key
from ustun.store import Database
from ustun.store.migrate import upgrade
from ustun.webhooks import endpoints as ops
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending.outbox import emit
from ustun.webhooks.tables import deliveries

try:
    from uvloop import run as run_loop
except ImportError:
    run_loop = asyncio.run  # type: ignore[assignment]

PG = os.environ.get("USTUN_BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
SECRET_KEY = "benchmark-secret-key-0123456789abcdef"
CONCURRENCY = 64
RECEIVER = r"""
import json, sys, time
from aiohttp import web
arrivals = {}
async def hook(request):
    await request.read()
    arrivals[request.headers.get("webhook-id", "")] = time.time()
    return web.Response(status=204)
async def times(request):
    return web.json_response(arrivals)
async def reset(request):
    arrivals.clear()
    return web.Response(status=204)
app = web.Application()
app.router.add_post("/hook", hook)
app.router.add_get("/times", times)
app.router.add_post("/reset", reset)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_up(url: str) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            try:
                async with http.get(url) as r:
                    if r.status < 500:
                        return
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} never came up")


async def bare_loop(url: str, n: int, body: bytes) -> float:
    """The ceiling: N POSTs at CONCURRENCY over one session; returns POSTs per second."""
    remaining = n

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            async with http.post(
                url, data=body, headers={"webhook-id": f"bare{remaining}"}, allow_redirects=False
            ) as r:
                await r.read()

    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as http:
        started = time.perf_counter()
        await asyncio.gather(*(worker(http) for _ in range(CONCURRENCY)))
        return n / (time.perf_counter() - started)


async def setup(db: Database, url: str) -> str:
    await upgrade(db)
    account = await account_for_key(db, await create_key(db, f"bench-{uuid.uuid4().hex[:8]}"))
    assert account is not None
    account_id = account.id
    async with db.unit_of_work() as uow:
        await ops.create(
            uow,
            SecretBox(SECRET_KEY),
            account_id,
            url=url,
            events=["*"],
            max_in_flight=CONCURRENCY,
        )
    return account_id


async def unsettled(db: Database) -> bool:
    """Whether any delivery is still to be sent: one row looked up on the due index. (This
    polls every 50 ms on the same cores; counting by status read the whole table each time,
    about 35 µs of PostgreSQL's CPU per delivery drained.)"""
    async with db.read() as conn:
        found = await conn.scalar(
            select(deliveries.c.id).where(deliveries.c.next_attempt_at.is_not(None)).limit(1)
        )
    return found is not None


@dataclass(frozen=True)
class Costs:
    """CPU µs per delivery (or per bare POST) of each process on the path."""

    sender: float
    receiver: float
    postgresql: float

    def __str__(self) -> str:
        total = self.sender + self.receiver + self.postgresql
        return (
            f"CPU µs each: sender {self.sender:.0f} + receiver {self.receiver:.0f}"
            f" + PostgreSQL {self.postgresql:.0f} = {total:.0f}"
        )


async def drained(db: Database, every: float = 0.05) -> None:
    """Return once no delivery is left unsent (looked up `every` seconds)."""
    while True:
        if not await unsettled(db):
            return
        await asyncio.sleep(every)


async def ceiling(url: str, n: int, body: bytes, receiver_pid: int) -> tuple[float, Costs]:
    """The bare loop's POSTs/s, and its CPU µs per POST: this process and the receiver."""
    cpu, receiver_cpu = time.process_time(), cpu_seconds(receiver_pid)
    rate = await bare_loop(url, n, body)
    costs = Costs(
        sender=(time.process_time() - cpu) / n * 1e6,
        receiver=(cpu_seconds(receiver_pid) - receiver_cpu) / n * 1e6,
        postgresql=0.0,
    )
    return rate, costs


async def drain(
    db: Database, account_id: str, n: int, worker_pid: int, receiver_pid: int
) -> tuple[float, float, Costs]:
    """Queue N deliveries in one commit with the worker idle; deliveries/s, the worker's CPU
    share, and CPU µs per delivery of the worker, the receiver and the database's backends."""
    async with db.unit_of_work() as uow:
        for i in range(n):
            await emit(uow, account_id, "payment.created", {"id": f"pay_{i}", "amount": i})
        committed = time.perf_counter()
    database = None if db.is_sqlite else db.engine.url.database
    cpu_before, receiver_cpu = cpu_seconds(worker_pid), cpu_seconds(receiver_pid)
    backends = await backend_cpu(database)
    await drained(db)
    elapsed = time.perf_counter() - committed
    worker_cpu = cpu_seconds(worker_pid) - cpu_before
    server_cpu = sum(
        seconds - backends.get(pid, 0.0) for pid, seconds in (await backend_cpu(database)).items()
    )
    costs = Costs(
        sender=worker_cpu / n * 1e6,
        receiver=(cpu_seconds(receiver_pid) - receiver_cpu) / n * 1e6,
        postgresql=server_cpu / n * 1e6,
    )
    return n / elapsed, worker_cpu / elapsed, costs


async def latency(
    db: Database, account_id: str, receiver: str, rate: float, seconds: float
) -> tuple[float, float, int]:
    """Emit at `rate`/s for `seconds`; p50 and p99 of commit → arrival in milliseconds."""
    async with aiohttp.ClientSession() as http:
        await http.post(f"{receiver}/reset")
        committed: dict[str, float] = {}
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
            async with db.unit_of_work() as uow:
                event_id = await emit(uow, account_id, "payment.created", {"id": f"pay_l{i}"})
            committed[event_id] = time.time()
        await drained(db)
        async with http.get(f"{receiver}/times") as r:
            arrivals: dict[str, float] = await r.json()
    samples = sorted((arrivals[e] - t) * 1000 for e, t in committed.items() if e in arrivals)
    p50 = statistics.median(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return p50, p99, len(samples)


async def pg_database() -> tuple[str, str]:
    name = f"ustun_bench_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(f"{PG}/postgres")
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    return name, f"{PG}/{name}"


async def drop_pg(name: str) -> None:
    conn = await asyncpg.connect(f"{PG}/postgres")
    await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await conn.close()


async def run_backend(
    backend: str, n: int, rate: float, seconds: float, rounds_wanted: int, profile: str | None
) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="ustun-bench-"))
    pg_name = None
    if backend == "postgresql":
        pg_name, url = await pg_database()
    else:
        url = f"sqlite:///{tmp / 'bench.db'}"
    port = free_port()
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, str(port)])  # noqa: ASYNC220
    base = f"http://127.0.0.1:{port}"
    db = Database(url)
    worker = None
    try:
        await wait_up(f"{base}/times")
        account_id = await setup(db, f"{base}/hook")
        body = json.dumps(
            {"id": "evt_x", "type": "payment.created", "data": {"amount": 1}}
        ).encode()
        env = {
            **os.environ,
            "USTUN_DATABASE_URL": url,
            "USTUN_SECRET_KEY": SECRET_KEY,
            "USTUN_WEBHOOK_ALLOW_PRIVATE": "1",
            "USTUN_LOG_LEVEL": "warning",
        }
        ustun = str(Path(sys.executable).with_name("ustun"))
        command = [ustun, "worker"]
        if profile:
            # cProfile the worker; read with `python -m pstats <file>`.
            command = [sys.executable, "-m", "cProfile", "-o", profile, ustun, "worker"]
        worker = subprocess.Popen(command, env=env)  # noqa: ASYNC220 - returns at once
        await asyncio.sleep(2.0)  # let the worker start and LISTEN
        rounds = []
        for _ in range(rounds_wanted):
            # Alternate on the same receiver, so both see the same machine load.
            bare, bare_costs = await ceiling(f"{base}/hook", n, body, receiver.pid)
            drained, worker_cpu, costs = await drain(db, account_id, n, worker.pid, receiver.pid)
            rounds.append((bare, drained, worker_cpu, bare_costs, costs))
        p50, p99, count = await latency(db, account_id, base, rate, seconds)
        return {
            "backend": backend,
            "rounds": rounds,
            "p50": p50,
            "p99": p99,
            "samples": count,
        }
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(30)
        receiver.terminate()
        receiver.wait(10)
        await db.dispose()
        if pg_name:
            await drop_pg(pg_name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("-n", type=int, default=10_000, help="deliveries to drain")
    parser.add_argument("--rate", type=float, default=200.0, help="events/s for latency")
    parser.add_argument("--seconds", type=float, default=10.0, help="latency run length")
    parser.add_argument("--rounds", type=int, default=2, help="alternating throughput rounds")
    parser.add_argument("--profile", help="cProfile the worker into this file")
    args = parser.parse_args()
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"concurrency {CONCURRENCY}, {args.n} deliveries, {args.rate:.0f} events/s"
    )
    for backend in backends:
        r = run_loop(
            run_backend(backend, args.n, args.rate, args.seconds, args.rounds, args.profile)
        )
        for bare, dispatched, cpu, bare_costs, costs in r["rounds"]:
            print(
                f"{backend:<10} bare aiohttp {bare:6.0f}/s  dispatcher {dispatched:6.0f}/s"
                f"  ratio {dispatched / bare:.2f}  (worker CPU {cpu:.0%} of a core,"
                f" {cpu / dispatched * 1e6:.0f} µs per delivery)"
            )
            print(f"{'':<10} bare loop  {bare_costs}")
            print(f"{'':<10} dispatcher {costs}")
        ratios = [d / b for b, d, *_ in r["rounds"]]
        print(
            f"{backend:<10} median ratio {statistics.median(ratios):.2f}"
            f"  latency p50 {r['p50']:.1f} ms  p99 {r['p99']:.1f} ms ({r['samples']} events)"
        )


if __name__ == "__main__":
    main()
