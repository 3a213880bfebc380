"""A fair share of the server for every account (issue 27): account A's light requests, alone
and beside each flood another account (B) can send with a valid key.

For each backend it starts one `ustun serve` (API and embedded worker, as shipped) on a fresh
database. A sends 20 light requests a second (a GET of one payment and a keyed POST, in turn)
and its p50/p99 and failures are measured, first alone, then while B runs one flood (after each
flood the next waits until A's requests are fast again, so no flood is billed for another):

- `pdf`: four PDF reports over B's 3,000 payments;
- `reports`: quick reports as fast as B can enqueue them (the pending-jobs quota answers 429);
- `streams`: SSE streams of a job, far more than the caps allow;
- `lists`: 64 concurrent list pages of 100;
- `transfers`: 256 concurrent transfers between two ledger accounts;
- `documents`: 1 MiB documents, each under a key of its own;
- `feed`: the event feed with `since=` in the future, 64 at a time;
- `paging`: the feed's first page of one event (`after=0&limit=1`), 64 at a time;
- `gets`: cheap GETs on 200 connections.

    .venv/bin/python benchmarks/fairness.py [--backend both] [--seconds 5]

Each flood runs in a process of its own, so that A's latencies are the server's; the machine
then holds the server, the flood and A's probe.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

USTUN = str(Path(sys.executable).with_name("ustun"))
SECRET_KEY = "benchmark-secret-key-of-at-least-32-characters"
KEY = re.compile(r"ustun_sk_[A-Za-z0-9_-]{43}")
A_RATE = 20  # A's requests per second
B_PAYMENTS = 3000
READY = b"flooding\n"  # what a flood process prints once its flood is under way
RAMP = 0.5  # seconds of the flood before A's probe starts
MIB = 2**20

Flood = Callable[[httpx.AsyncClient, asyncio.Event], Awaitable[None]]


@dataclass
class Probe:
    """A's requests during one phase: latencies of the answered ones, and what went wrong."""

    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # ids of the payments A was answered 201

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies) * 1000

    @property
    def p99(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1000

    def summary(self) -> dict[str, object]:
        """How many answered, p50 and p99 in ms (None if none answered), and the failures."""
        answered = bool(self.latencies)
        return {
            "answered": len(self.latencies),
            "p50": self.p50 if answered else None,
            "p99": self.p99 if answered else None,
            "failures": self.failures,
        }


@dataclass
class Service:
    """A running `ustun serve` and the keys of its two accounts."""

    base_url: str
    key_a: str
    key_b: str


def _env(database_url: str, workdir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "USTUN_DATABASE_URL": database_url,
        "USTUN_SECRET_KEY": SECRET_KEY,
        "USTUN_LOG_LEVEL": "warning",
        "USTUN_WEBHOOK_ALLOW_PRIVATE": "1",
        "HOME": str(workdir),
    }


@contextlib.contextmanager
def serving(database_url: str, workdir: Path, port: int) -> Iterator[Service]:
    """`ustun serve` on `database_url` until the block ends; yields its `Service`."""
    env = _env(database_url, workdir)
    log = (workdir / "serve.log").open("wb")
    proc = subprocess.Popen(
        [USTUN, "serve", "--port", str(port)], env=env, stdout=log, stderr=log, cwd=workdir
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        key_a = None
        while key_a is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((workdir / "serve.log").read_text(errors="replace")[-3000:])
            found = KEY.search((workdir / "serve.log").read_text(errors="replace"))
            key_a = found.group() if found else None
            time.sleep(0.1)
        made = subprocess.run(
            [USTUN, "keys", "create", "--account", "flooder"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=workdir,
        )
        yield Service(base, key_a, made.stdout.strip())
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()  # not left running; the error says it did not stop
            proc.wait()
            raise
        finally:
            log.close()


def client(service: Service, key: str, connections: int = 100) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(
        base_url=service.base_url,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
        limits=limits,
    )


async def _pay(http: httpx.AsyncClient, amount: int = 100) -> httpx.Response:
    return await http.post(
        "/v1/payments",
        json={"amount": amount, "currency": "EUR"},
        headers={"idempotency-key": uuid.uuid4().hex},
    )


async def prepare(service: Service, payments: int = B_PAYMENTS) -> str:
    """B's `payments` (what its reports read) and A's one payment to GET; A's id."""
    async with client(service, service.key_b, 32) as b:
        sem = asyncio.Semaphore(32)

        async def one(n: int) -> None:
            async with sem:
                answer = await _pay(b, 100 + n)
                while answer.status_code == 429:  # B's request rate: wait as it says
                    await asyncio.sleep(float(answer.headers["retry-after"]))
                    answer = await _pay(b, 100 + n)
                answer.raise_for_status()

        await asyncio.gather(*(one(n) for n in range(payments)))
    async with client(service, service.key_a, 4) as a:
        answer = await _pay(a)
        answer.raise_for_status()
        return str(answer.json()["id"])


async def probe(service: Service, payment_id: str, seconds: float) -> Probe:
    """A's light requests at `A_RATE`/s for `seconds`, each on its own schedule (a slow answer
    does not delay the next request)."""
    result = Probe()
    async with client(service, service.key_a, 64) as a:

        async def one(n: int) -> None:
            started = time.monotonic()
            try:
                if n % 2:
                    answer = await a.get(f"/v1/payments/{payment_id}")
                else:
                    answer = await _pay(a)
            except httpx.HTTPError as error:
                result.failures.append(type(error).__name__)
                return
            result.latencies.append(time.monotonic() - started)
            if answer.status_code >= 300:
                result.failures.append(str(answer.status_code))
            elif answer.status_code == 201:
                result.created.append(answer.json()["id"])

        tasks = []
        start = time.monotonic()
        for n in range(int(seconds * A_RATE)):
            await asyncio.sleep(max(0.0, start + n / A_RATE - time.monotonic()))
            tasks.append(asyncio.create_task(one(n)))
        await asyncio.gather(*tasks)
    return result


async def _repeat(workers: int, stop: asyncio.Event, step: Callable[[], Awaitable[object]]) -> None:
    """`workers` loops of `step` until `stop`; B's errors and refusals are its own business."""

    async def loop() -> None:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                await step()

    await asyncio.gather(*(loop() for _ in range(workers)))


async def pdf(b: httpx.AsyncClient, stop: asyncio.Event) -> None:
    year = time.gmtime().tm_year
    for _ in range(4):
        await b.post("/v1/reports", json={"period": str(year), "format": "pdf"})
    await stop.wait()


async def reports(b: httpx.AsyncClient, stop: asyncio.Event) -> None:
    year = str(time.gmtime().tm_year)
    await _repeat(16, stop, lambda: b.post("/v1/reports", json={"period": year, "format": "json"}))


async def streams(b: httpx.AsyncClient, stop: asyncio.Event) -> None:
    made = await b.post("/v1/reports", json={"period": "2001", "format": "json"})
    job = made.headers.get("location", "/v1/jobs/job_missing")

    async def stream() -> None:
        async with b.stream("GET", f"{job}/events") as answer:
            async for _ in answer.aiter_bytes():
                if stop.is_set():
                    return

    await _repeat(300, stop, stream)


async def lists(b: httpx.AsyncClient, stop: asyncio.Event) -> None:
    await _repeat(64, stop, lambda: b.get("/v1/payments", params={"limit": 100}))


async def transfers(b: httpx.AsyncClient, stop: asyncio.Event) -> None:
    ids = []
    for _ in range(2):
        made = await b.post(
            "/v1/ledger-accounts",
            json={"currency": "EUR", "balance": 10**12},
            headers={"idempotency-key": uuid.uuid4().hex},
        )
        ids.append(made.json().get("id"))

    async def move() -> None:
        await b.post(
            "/v1/transfers",
            json={"from": ids[0], "to": ids[1], "amount": 1, "currency": "EUR"},
            headers={"idempotency-key": uuid.uuid4().hex},
        )

    await _repeat(256, stop, move)


async def documents(b: httpx.AsyncClient, stop: asyncio.Event) -> None:
    body = "x" * MIB

    async def store() -> None:
        await b.post(
            "/v1/documents",
            json={"title": "big", "body": body},
            headers={"idempotency-key": uuid.uuid4().hex},
        )

    await _repeat(4, stop, store)


async def feed(b: httpx.AsyncClient, stop: asyncio.Event) -> None:
    future = {"since": "9999-12-31T00:00:00Z", "limit": 100}
    await _repeat(64, stop, lambda: b.get("/v1/events", params=future))


async def paging(b: httpx.AsyncClient, stop: asyncio.Event) -> None:
    first = {"after": "0", "limit": 1}
    await _repeat(64, stop, lambda: b.get("/v1/events", params=first))


async def gets(b: httpx.AsyncClient, stop: asyncio.Event) -> None:
    await _repeat(200, stop, lambda: b.get("/v1/payments", params={"limit": 1}))


FLOODS: dict[str, Flood] = {
    "pdf": pdf,
    "reports": reports,
    "streams": streams,
    "lists": lists,
    "transfers": transfers,
    "documents": documents,
    "feed": feed,
    "paging": paging,
    "gets": gets,
}


async def beside(service: Service, payment_id: str, flood: str, seconds: float) -> Probe:
    """A's probe while B runs `flood` in a process of its own (so that A's latencies are the
    server's, not those of a client loop shared with the flood); it starts `RAMP` seconds
    after the flood is under way."""
    flooder = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--flood",
        flood,
        service.base_url,
        service.key_b,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert flooder.stdout is not None
        if await asyncio.wait_for(flooder.stdout.readline(), 60) != READY:
            raise RuntimeError(f"the {flood} flood did not start")
        await asyncio.sleep(RAMP)
        return await probe(service, payment_id, seconds)
    finally:
        flooder.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(flooder.wait(), 30)
        except TimeoutError:
            flooder.kill()
            await flooder.wait()


async def flooding(name: str, base_url: str, key: str) -> None:
    """Run the flood `name` as B until interrupted (SIGINT), at a low priority: B's client
    stands in for another machine, so its own CPU is not taken from the server's."""
    os.nice(10)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
    service = Service(base_url, "", key)
    async with client(service, key, 400) as b:
        running = asyncio.create_task(FLOODS[name](b, stop))
        sys.stdout.buffer.write(READY)
        sys.stdout.flush()
        await stop.wait()
        running.cancel()  # what B has under way is its own business, as are its errors
        with contextlib.suppress(BaseException):
            await running


async def settle(service: Service, payment_id: str, within: float = 180.0) -> None:
    """Wait until A's GET answers fast again (a flood's work may outlast it, as a PDF render
    does), so that each flood is measured on its own."""
    deadline = time.monotonic() + within
    fast = 0
    async with client(service, service.key_a, 1) as a:
        while fast < 5 and time.monotonic() < deadline:
            started = time.monotonic()
            with contextlib.suppress(httpx.HTTPError):
                await a.get(f"/v1/payments/{payment_id}")
            fast = fast + 1 if time.monotonic() - started < 0.05 else 0
            await asyncio.sleep(0.1)


async def measure(
    service: Service,
    payment_id: str,
    phases: list[str],
    seconds: float,
    shown: Callable[[str, Probe], None] | None = None,
) -> dict[str, Probe]:
    """A's probe in each phase in turn: `nothing` (alone) or beside a flood of `FLOODS`; the
    server settles after each. `shown` sees each phase's probe as it ends."""
    results = {}
    for name in phases:
        if name == "nothing":
            results[name] = await probe(service, payment_id, seconds)
        else:
            results[name] = await beside(service, payment_id, name, seconds)
        if shown is not None:
            shown(name, results[name])
        await settle(service, payment_id)
    return results


@contextlib.asynccontextmanager
async def database(backend: str, workdir: Path) -> AsyncIterator[str]:
    """A fresh database of `backend`, dropped afterwards (PostgreSQL)."""
    if backend == "sqlite":
        yield f"sqlite:///{workdir / 'ustun.db'}"
        return
    from jobs import PG, drop_pg_database, fresh_pg_database  # not in the flood processes

    name = await fresh_pg_database()
    try:
        yield f"{PG}/{name}"
    finally:
        await drop_pg_database(name)


def _row(name: str, probe_: Probe) -> str:
    if not probe_.latencies:
        return f"| {name} | - | - | {len(probe_.failures)} |"
    return f"| {name} | {probe_.p50:.1f} | {probe_.p99:.1f} | {len(probe_.failures)} |"


async def run(backend: str, seconds: float, floods: list[str], *, as_json: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        async with database(backend, workdir) as url:
            with serving(url, workdir, _free_port()) as service:
                payment_id = await prepare(service)
                if not as_json:
                    print(f"\n{backend}: A's ms, {A_RATE} requests/s for {seconds:g} s each\n")
                    print("| beside | p50 | p99 | failures |\n|---|---:|---:|---:|")
                shown = None if as_json else lambda name, p: print(_row(name, p), flush=True)
                results = await measure(service, payment_id, ["nothing", *floods], seconds, shown)
                if as_json:
                    print(json.dumps({backend: {k: v.summary() for k, v in results.items()}}))


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--floods", default=",".join(FLOODS))
    parser.add_argument("--json", action="store_true", help="print A's latencies as JSON")
    parser.add_argument("--flood", nargs=3, metavar=("NAME", "URL", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood:
        asyncio.run(flooding(*args.flood))
        return
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    for backend in backends:
        asyncio.run(run(backend, args.seconds, args.floods.split(","), as_json=args.json))


if __name__ == "__main__":
    main()
