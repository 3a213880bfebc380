"""Webhooks with a stuck customer: 50 endpoints, one saturated, 2 `ustun worker` processes on one
PostgreSQL; the same measurements WITHOUT and then WITH the saturated endpoint's backlog.

    .venv/bin/python benchmarks/webhooks_scale.py [--backlog 200000] [--quick]

The 49 healthy endpoints point at one receiver process (aiohttp, 204 at once, arrival times
per endpoint and event). The saturated one (`max_in_flight=1`) points at a socket that accepts
connections and never answers. Each phase measures:
- drain: events committed in one transaction, until the receiver has every healthy delivery:
  deliveries/s and PostgreSQL CPU per delivery;
- steady: events committed one by one at `--rate`/s: the healthy deliveries' commit → receipt
  p50 / p99, and PostgreSQL CPU per delivery (every claim follows a NOTIFY here).
The backlog (due deliveries of the saturated endpoint, at the head of the due order) is
written in SQL between the phases. PostgreSQL CPU is that of every backend connected to the
benchmark's database (the workers' and this process's), from /proc schedstat.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import asyncpg

from backlog import SECRET_KEY, add_endpoints, insert_backlog, new_account
from jobs import backend_cpu
from ustun.store import Database
from ustun.webhooks.sending.outbox import emit
from webhooks import drop_pg, free_port, pg_database, wait_up

HEALTHY = 49
WORKERS = 2
RECEIVER = r"""
import sys, time
from aiohttp import web
arrivals = {}
async def hook(request):
    await request.read()
    arrivals.setdefault(request.match_info["n"] + " " + request.headers["webhook-id"], time.time())
    return web.Response(status=204)
async def times(request):
    return web.json_response(arrivals)
async def count(request):
    return web.json_response(len(arrivals))
app = web.Application()
app.router.add_post("/h/{n}", hook)
app.router.add_get("/times", times)
app.router.add_get("/count", count)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


@dataclass(frozen=True)
class Figures:
    """One phase's results."""

    drain_rate: float
    drain_cpu_us: float
    p50_ms: float
    p99_ms: float
    steady_cpu_us: float
    samples: int


class Bench:
    """The database, the account, the receiver and the workers of one run."""

    def __init__(self, db: Database, account_id: str, receiver: str) -> None:
        self.db = db
        self.account_id = account_id
        self.receiver = receiver
        self.database = db.engine.url.database
        self.expected = 0  # healthy deliveries queued so far

    async def received(self, http: aiohttp.ClientSession) -> int:
        async with http.get(f"{self.receiver}/count") as r:
            found: int = await r.json()
            return found

    async def delivered(self, events: int, within: float = 300.0) -> None:
        """Wait until the receiver has every healthy delivery of `events` more events."""
        self.expected += events * HEALTHY
        deadline = time.monotonic() + within
        async with aiohttp.ClientSession() as http:
            while await self.received(http) < self.expected:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"healthy deliveries missing after {within} s")
                await asyncio.sleep(0.05)

    async def cpu(self) -> float:
        return sum((await backend_cpu(self.database)).values())

    async def drain(self, events: int) -> tuple[float, float]:
        """`events` events in one commit: healthy deliveries/s, PostgreSQL CPU µs each."""
        cpu = await self.cpu()
        async with self.db.unit_of_work() as uow:
            for i in range(events):
                await emit(uow, self.account_id, "payment.created", {"id": f"pay_d{i}"})
        started = time.perf_counter()
        await self.delivered(events)
        elapsed = time.perf_counter() - started
        deliveries = events * HEALTHY
        return deliveries / elapsed, (await self.cpu() - cpu) / deliveries * 1e6

    async def steady(self, rate: float, seconds: float) -> tuple[float, float, float, int]:
        """Events at `rate`/s: p50, p99 ms commit → receipt, PostgreSQL CPU µs per delivery."""
        cpu = await self.cpu()
        committed: dict[str, float] = {}
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
            async with self.db.unit_of_work() as uow:
                event_id = await emit(uow, self.account_id, "payment.created", {"id": f"pay_{i}"})
            committed[event_id] = time.time()
        await self.delivered(len(committed))
        spent = await self.cpu() - cpu
        async with aiohttp.ClientSession() as http, http.get(f"{self.receiver}/times") as r:
            arrivals: dict[str, float] = await r.json()
        samples = sorted(
            (at - committed[key.split(" ")[1]]) * 1000
            for key, at in arrivals.items()
            if key.split(" ")[1] in committed
        )
        p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
        cpu_us = spent / len(samples) * 1e6
        return statistics.median(samples), p99, cpu_us, len(samples)

    async def phase(self, events: int, rate: float, seconds: float) -> Figures:
        rate_d, cpu_d = await self.drain(events)
        p50, p99, cpu_s, samples = await self.steady(rate, seconds)
        return Figures(rate_d, cpu_d, p50, p99, cpu_s, samples)


def blackhole() -> socket.socket:
    """A listening socket nobody accepts from: connections open, requests are never answered."""
    return socket.create_server(("127.0.0.1", 0), backlog=1024)


def workers(url: str) -> list[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "USTUN_DATABASE_URL": url,
        "USTUN_SECRET_KEY": SECRET_KEY,
        "USTUN_WEBHOOK_ALLOW_PRIVATE": "1",
        # A stuck request ends after this; the lease (60 s) covers a claim's two rounds.
        "USTUN_WEBHOOK_TIMEOUT": "20",
        "USTUN_LOG_LEVEL": "warning",
    }
    ustun = str(Path(sys.executable).with_name("ustun"))
    return [subprocess.Popen([ustun, "worker"], env=env) for _ in range(WORKERS)]


async def run(backlog: int, events: int, rate: float, seconds: float) -> list[Figures]:
    name, url = await pg_database()
    port = free_port()
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, str(port)])  # noqa: ASYNC220
    hole = blackhole()
    db = Database(url)
    started: list[subprocess.Popen[bytes]] = []
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_up(f"{base}/count")
        account_id = await new_account(db)
        await add_endpoints(db, account_id, [f"{base}/h/{n}" for n in range(HEALTHY)])
        stuck = f"http://127.0.0.1:{hole.getsockname()[1]}/stuck"
        [saturated] = await add_endpoints(db, account_id, [stuck], max_in_flight=1)
        started = workers(url)
        bench = Bench(db, account_id, base)
        async with db.unit_of_work() as uow:  # warm-up: both workers up and listening
            await emit(uow, account_id, "payment.created", {"id": "pay_warm"})
        await bench.delivered(1, within=60)
        without = await bench.phase(events, rate, seconds)
        conn = await asyncpg.connect(url)
        try:
            await insert_backlog(conn, account_id, saturated, backlog)
        finally:
            await conn.close()
        with_backlog = await bench.phase(events, rate, seconds)
        return [without, with_backlog]
    finally:
        for worker in started:  # no graceful stop: it would wait for the stuck requests
            worker.kill()
            worker.wait(10)
        receiver.terminate()
        receiver.wait(10)
        hole.close()
        await db.dispose()
        await drop_pg(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=200_000, help="saturated endpoint's rows")
    parser.add_argument("--events", type=int, default=200, help="events per drain")
    parser.add_argument("--rate", type=float, default=20.0, help="events/s in the steady run")
    parser.add_argument("--seconds", type=float, default=10.0, help="steady run length")
    parser.add_argument("--quick", action="store_true", help="20,000 backlog, short phases")
    args = parser.parse_args()
    if args.quick:
        args.backlog, args.events, args.seconds = 20_000, 50, 4.0
    print(
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; {HEALTHY} healthy endpoints + 1"
        f" saturated, {WORKERS} workers; drain {args.events} events, steady {args.rate:.0f}"
        f" events/s for {args.seconds:.0f} s ({HEALTHY} healthy deliveries per event)"
    )
    without, with_backlog = asyncio.run(run(args.backlog, args.events, args.rate, args.seconds))
    rows = [
        ("drain deliveries/s", "{:,.0f}", "drain_rate"),
        ("drain PostgreSQL CPU µs/delivery", "{:,.0f}", "drain_cpu_us"),
        ("steady p50 commit→receipt ms", "{:.1f}", "p50_ms"),
        ("steady p99 commit→receipt ms", "{:.1f}", "p99_ms"),
        ("steady PostgreSQL CPU µs/delivery", "{:,.0f}", "steady_cpu_us"),
        ("steady deliveries measured", "{:,}", "samples"),
    ]
    print(f"| | without backlog | with {args.backlog:,} backlog | with / without |")
    print("|---|---:|---:|---:|")
    for label, form, attr in rows:
        a, b = getattr(without, attr), getattr(with_backlog, attr)
        print(f"| {label} | {form.format(a)} | {form.format(b)} | {b / a:.2f}x |")


if __name__ == "__main__":
    main()
