"""Optimistic-concurrency benchmark against a real `ustun serve`.

1. Conditional GET (`If-None-Match` → 304) vs full GET (200) of one document, requests/s,
   measured side by side in alternating rounds of the same run (with `/healthz` as a baseline
   for what the framework alone costs).
2. The contended write path: N writers doing GET → PUT `If-Match` on one document; successful
   writes/s and the share of PUTs answered 412.

    .venv/bin/python benchmarks/concurrency.py [--backend sqlite|postgresql|both] [--seconds 3]

The load generator is aiohttp (already a server dependency) so the client costs little CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import asyncpg

USTUN = str(Path(sys.executable).with_name("ustun"))
PG_SERVER = os.environ.get("USTUN_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
BODY_BYTES = 16 * 1024


@dataclass
class Counts:
    """Responses by status over a timed phase."""

    by_status: dict[int, int]
    seconds: float

    def rate(self, *statuses: int) -> float:
        return sum(self.by_status.get(s, 0) for s in statuses) / self.seconds


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _pg_admin(sql: str) -> None:
    conn = await asyncpg.connect(PG_SERVER)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextmanager
def _database(backend: str) -> Iterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/bench.db"
        return
    name = f"ustun_bench_{uuid.uuid4().hex[:12]}"
    asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{PG_SERVER.rsplit('/', 1)[0]}/{name}"
    finally:
        asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextmanager
def _server(database_url: str) -> Iterator[tuple[str, str]]:
    env = {**os.environ, "USTUN_DATABASE_URL": database_url, "USTUN_LOG_LEVEL": "warning"}
    subprocess.run([USTUN, "migrate"], env=env, check=True, capture_output=True)
    made = subprocess.run(
        [USTUN, "keys", "create", "--account", "bench"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    port = _free_port()
    proc = subprocess.Popen(
        [USTUN, "serve", "--port", str(port), "--no-worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("ustun serve did not start") from None
                time.sleep(0.1)
        yield base, made.stdout.strip()
    finally:
        proc.terminate()
        proc.wait(20)


async def _timed(seconds: float, workers: int, one: Callable[[], Awaitable[int]]) -> Counts:
    counts: dict[int, int] = {}
    stop = time.monotonic() + seconds

    async def worker() -> None:
        while time.monotonic() < stop:
            status = await one()
            counts[status] = counts.get(status, 0) + 1

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return Counts(counts, time.monotonic() - started)


async def _reads(http: aiohttp.ClientSession, url: str, seconds: float, rounds: int) -> None:
    async with http.get(url) as got:
        tag = got.headers["etag"]

    async def full() -> int:
        async with http.get(url) as response:
            await response.read()
            return response.status

    async def conditional() -> int:
        async with http.get(url, headers={"if-none-match": tag}) as response:
            await response.read()
            return response.status

    async def baseline() -> int:
        async with http.get("/healthz") as response:
            await response.read()
            return response.status

    phases = (("baseline", baseline), ("full", full), ("conditional", conditional))
    totals = {name: Counts({}, 0.0) for name, _ in phases}
    for _ in range(rounds):
        for name, one in phases:
            counts = await _timed(seconds, 16, one)
            total = totals[name]
            for status, n in counts.by_status.items():
                total.by_status[status] = total.by_status.get(status, 0) + n
            total.seconds += counts.seconds
    full_rate, cond_rate = totals["full"].rate(200), totals["conditional"].rate(304)
    assert set(totals["full"].by_status) == {200}, totals["full"].by_status
    assert set(totals["conditional"].by_status) == {304}, totals["conditional"].by_status
    print(f"  {'GET /healthz (no auth, no DB)':<34}{totals['baseline'].rate(200):8.0f} req/s")
    print(f"  {f'full GET (200, {BODY_BYTES // 1024} KiB body)':<34}{full_rate:8.0f} req/s")
    print(f"  {'conditional GET (304)':<34}{cond_rate:8.0f} req/s")
    print(f"  {'ratio 304 / 200':<34}{cond_rate / full_rate:8.2f}x")


async def _writes(http: aiohttp.ClientSession, url: str, seconds: float, writers: int) -> None:
    async def read_modify_write() -> int:
        async with http.get(url) as got:
            current = await got.json()
            tag = got.headers["etag"]
        change = {"title": current["title"], "body": str(int(current["version"]))}
        async with http.put(url, json=change, headers={"if-match": tag}) as put:
            await put.read()
            return put.status

    counts = await _timed(seconds, writers, read_modify_write)
    assert set(counts.by_status) <= {200, 412}, counts.by_status
    ok, stale = counts.by_status.get(200, 0), counts.by_status.get(412, 0)
    print(f"  {writers} writer(s) on one document, GET then PUT If-Match:")
    print(f"    {'successful writes':<32}{counts.rate(200):8.0f} /s")
    print(f"    {'412 rate':<32}{stale / max(1, ok + stale):8.1%} of {ok + stale} PUTs")


async def _run(base: str, key: str, seconds: float, rounds: int, writers: list[int]) -> None:
    headers = {"authorization": f"Bearer {key}"}
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(base, headers=headers, connector=connector) as http:
        body = {"title": "bench", "body": "x" * BODY_BYTES}
        async with http.post("/v1/documents", json=body) as made:
            url = made.headers["location"]
        await _reads(http, url, seconds, rounds)
        for n in writers:
            async with http.post("/v1/documents", json={"title": "w", "body": "0"}) as made:
                await _writes(http, made.headers["location"], seconds, n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each timed phase")
    parser.add_argument("--rounds", type=int, default=2, help="alternating read rounds")
    parser.add_argument("--writers", default="1,8", help="comma-separated writer counts")
    args = parser.parse_args()
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    writers = [int(n) for n in args.writers.split(",")]
    for backend in backends:
        print(f"{backend}:")
        with _database(backend) as url, _server(url) as (base, key):
            asyncio.run(_run(base, key, args.seconds, args.rounds, writers))


if __name__ == "__main__":
    main()
