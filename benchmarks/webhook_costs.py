"""Where a webhook delivery's CPU goes in the worker: the signed POST, and everything else.

`benchmarks/webhooks.py` gives the ratio to a bare aiohttp POST loop; this splits the worker's
side of it, measured side by side on this noisy machine:

1. **POSTs**: CPU µs per POST of a bare aiohttp POST (the ceiling's sender) and of ustun's
   `transport.post` carrying the three Standard Webhooks headers (signed once, outside the
   timing), in interleaved batches against one receiver process; each of ustun's batches is
   compared with the bare batch next to it.
2. **Bookkeeping**: a `Dispatcher` in this process drains N queued deliveries on PostgreSQL with
   the HTTP call replaced by an immediate 204: claim, bodies, signing, outcomes, settle. Its CPU
   µs per delivery is what a delivery costs the worker besides the POST itself.

The sum, in bare POSTs, bounds the worker: one process at 100% of a core delivers at most
1/sum times as fast as the bare loop's sender, which runs at about 100% of a core.

    .venv/bin/python benchmarks/webhook_costs.py [--rounds 30] [--batch 500] [-n 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from ustun import ids
from ustun.http.signature import Secret
from ustun.http.signature import headers as signed_headers
from ustun.store import Database
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending import dispatcher, transport
from ustun.webhooks.sending.outbox import emit
from webhooks import (
    CONCURRENCY,
    RECEIVER,
    SECRET_KEY,
    drained,
    drop_pg,
    free_port,
    pg_database,
    run_loop,
    setup,
    wait_up,
)

BODY = (
    b'{"id":"evt_2bq1fWzJ6n0CwYb3oTgLkQxR","type":"payment.created",'
    b'"timestamp":"2026-12-03T16:00:00.000000Z","data":{"id":"pay_1","amount":1}}'
)
Post = Callable[[aiohttp.ClientSession, int], Awaitable[Any]]


async def batch(http: aiohttp.ClientSession, post: Post, n: int) -> float:
    """CPU µs per POST of n POSTs at CONCURRENCY."""
    remaining = n

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await post(http, remaining)

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return (time.process_time() - started) / n * 1e6


async def posts(url: str, rounds: int, size: int) -> dict[str, list[float]]:
    """Interleaved batches: the bare POST, then ustun's POST; CPU µs per POST each."""
    signed = signed_headers([Secret.generate()], ids.new_id("evt"), BODY)

    async def bare(http: aiohttp.ClientSession, i: int) -> None:
        headers = {"webhook-id": f"bare{i}"}
        async with http.post(url, data=BODY, headers=headers, allow_redirects=False) as r:
            await r.read()

    async def ustun(http: aiohttp.ClientSession, i: int) -> transport.Outcome:
        return await transport.post(http, url, BODY, dict(signed), allow_private=True)

    sessions = {
        "bare": (aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY)), bare),
        "ustun": (
            transport.session(timeout=10.0, allow_private=True, limit=CONCURRENCY),
            ustun,
        ),
    }
    costs: dict[str, list[float]] = {name: [] for name in sessions}
    try:
        for _ in range(rounds):
            for name, (http, post) in sessions.items():
                costs[name].append(await batch(http, post, size))
    finally:
        for http, _ in sessions.values():
            await http.close()
    return costs


async def bookkeeping(url: str, n: int) -> tuple[float, float]:
    """Drain n deliveries with an instant 204 for every POST; deliveries/s and CPU µs each."""

    async def instant(*_: Any, **__: Any) -> transport.Outcome:
        await asyncio.sleep(0)
        return transport.Outcome(204, 0.1, response="")

    name, database_url = await pg_database()
    db = Database(database_url)
    original = dispatcher.transport.post
    dispatcher.transport.post = instant  # type: ignore[assignment]
    try:
        account_id = await setup(db, url)
        config = dispatcher.DispatchConfig(
            retry_schedule=[1.0],
            timeout=10.0,
            allow_private=True,
            lease=60.0,
            public_url="http://127.0.0.1:8000",
        )
        stopping = asyncio.Event()
        worker = dispatcher.Dispatcher(db, SecretBox(SECRET_KEY), config)
        gc.freeze()  # as `ustun worker` does
        running = asyncio.create_task(worker.run(stopping))
        async with db.unit_of_work() as uow:
            for i in range(n):
                await emit(uow, account_id, "payment.created", {"id": f"pay_{i}", "amount": i})
        started, cpu = time.perf_counter(), time.process_time()
        await drained(db)
        elapsed, used = time.perf_counter() - started, time.process_time() - cpu
        stopping.set()
        await running
        return n / elapsed, used / n * 1e6
    finally:
        dispatcher.transport.post = original
        await db.dispose()
        await drop_pg(name)


async def run(rounds: int, size: int, n: int) -> None:
    port = free_port()
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, str(port)])  # noqa: ASYNC220
    url = f"http://127.0.0.1:{port}/hook"
    try:
        await wait_up(f"http://127.0.0.1:{port}/times")
        costs = await posts(url, rounds, size)
        rate, extra = await bookkeeping(url, n)
    finally:
        receiver.terminate()
        receiver.wait(10)
    bare = statistics.median(costs["bare"])
    ours = statistics.median(costs["ustun"])
    paired = statistics.median(u / b for u, b in zip(costs["ustun"], costs["bare"], strict=True))
    print(f"bare aiohttp POST                 {bare:5.0f} µs CPU (median of {rounds} batches)")
    print(f"ustun POST, Standard Webhooks     {ours:5.0f} µs CPU, {paired:.2f}x the bare POST")
    print(f"dispatcher without the POST       {extra:5.0f} µs CPU per delivery ({rate:.0f}/s)")
    floor = paired + extra / bare
    print(
        f"one delivery in the worker        {floor:.2f}x a bare POST: with the worker's core"
        f" 100% busy, at most {1 / floor:.2f}x the bare loop"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="interleaved batches of each")
    parser.add_argument("--batch", type=int, default=500, help="POSTs per batch")
    parser.add_argument("-n", type=int, default=20_000, help="deliveries for the bookkeeping")
    args = parser.parse_args()
    run_loop(run(args.rounds, args.batch, args.n))


if __name__ == "__main__":
    main()
