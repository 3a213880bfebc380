"""Webhooks at scale (issue 19): 2 `ustun serve --no-worker` + 3 `ustun worker` processes on one
fresh PostgreSQL database, 20 endpoints at real local receivers, payments created through both
servers at once, one worker killed with SIGKILL mid-run. Everything is judged from what the
receivers saw.

The scenario runs once per module (`run`); each test reads one property off its record.

Commit order (for the FIFO endpoint): payment A's event committed before payment B's when the
201 for A reached the client before B's POST was sent. Concurrent POSTs have no order, so only
such pairs are checked; that holds for any implementation, whatever ids or clocks it uses.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from support import (
    FIRST_KEY,
    Server,
    UstunProcess,
    drop_pg_database,
    make_pg_database,
    wait_for,
)
from webhook_support import Received, Receiver, Reply, ThreadedReceiver, sleep, until

# `alone`: the rate limit is judged by arrivals per second, which a loaded machine's stalls
# bunch (24 in one second against 20 + 3 once, beside the rest of the suite; alone it holds).
pytestmark = [pytest.mark.e2e, pytest.mark.alone]

PAYMENTS = 100
CLIENTS = 8  # concurrent payment creators, alternating between the two servers
WORKERS = 3
NORMAL_ENDPOINTS = 16
MAX_IN_FLIGHT = 2
RATE_LIMIT = 20
# A window [t, t + 1 s] holds RATE_LIMIT + 1 evenly spaced sends; two more for the arrival
# stamps, which the receivers take on this test's busy event loop.
RATE_TOLERANCE = 3
SLOW = 0.2  # seconds the slow receiver takes to answer
CAPPED_ANSWER = 0.2  # the capped receiver answers after this, so its requests overlap
# Kill a worker once this share of all deliveries has arrived.
KILL_AFTER = 0.25
ENV = {
    "USTUN_WEBHOOK_ALLOW_PRIVATE": "1",
    "USTUN_WEBHOOK_TIMEOUT": "5",
    # Short enough that the killed worker's deliveries come back within the test, long enough
    # that no live worker's lease runs out while its sends wait behind a cap or rate limit.
    "USTUN_WEBHOOK_LEASE": "6",
    "USTUN_WEBHOOK_RETRY_SCHEDULE": "0.2,0.4,0.8",
    "USTUN_LOG_LEVEL": "warning",
}


@dataclass(frozen=True)
class Sent:
    """One payment as its client saw it (monotonic clock, shared with the receivers)."""

    payment_id: str
    sent: float
    answered: float


@dataclass
class Run:
    """What the scenario did and what each receiver saw."""

    payments: dict[str, Sent] = field(default_factory=dict)
    # event id -> payment id, from GET /v1/events
    events: dict[str, str] = field(default_factory=dict)
    receivers: dict[str, Receiver] = field(default_factory=dict)
    fifo_answer: tuple[int, dict[str, Any]] = (0, {})
    killed_at: float = 0.0
    killed_status: int | None = None
    # The local ports of the killed worker's connections: requests it sent came from these.
    killed_ports: set[int] = field(default_factory=set)


def event_ids(receiver: Receiver) -> list[str]:
    """The event ids of every request `receiver` got, in arrival order (duplicates kept)."""
    return [json.loads(body)["id"] for body in receiver.bodies()]


def replies(reply: Reply) -> list[Reply]:
    """`reply` for every request the scenario can send one endpoint, retries included."""
    return [reply] * PAYMENTS * 4


async def _endpoint(http: httpx.AsyncClient, receiver: Receiver, **options: Any) -> httpx.Response:
    return await http.post(
        "/v1/webhook-endpoints", json={"url": receiver.url(), "events": ["*"], **options}
    )


async def _create_payments(servers: list[httpx.AsyncClient], run: Run, wanted: range) -> None:
    """A payment for each of `wanted`, CLIENTS at a time, each client alternating servers."""
    numbers = iter(wanted)

    async def client(n: int) -> None:
        for i in numbers:
            http = servers[(n + i) % len(servers)]
            sent = time.monotonic()
            answer = await http.post(
                "/v1/payments",
                json={"amount": 100 + i, "currency": "EUR", "order_id": i},
                headers={"idempotency-key": str(uuid.uuid4())},
            )
            answered = time.monotonic()
            assert answer.status_code == 201, answer.text
            payment_id = answer.json()["id"]
            run.payments[payment_id] = Sent(payment_id, sent, answered)

    await asyncio.gather(*(client(n) for n in range(CLIENTS)))


async def _all_events(http: httpx.AsyncClient) -> dict[str, str]:
    """Every event of the account (event id -> payment id), page by page."""
    found: dict[str, str] = {}
    params: dict[str, Any] = {"limit": 100}
    while True:
        page = (await http.get("/v1/events", params=params)).json()
        found.update({e["id"]: e["data"]["id"] for e in page["data"]})
        if not page["next_cursor"]:
            return found
        params["cursor"] = page["next_cursor"]


async def _settled(http: httpx.AsyncClient) -> bool:
    """No delivery is still pending or failed (a killed worker's leases have run out)."""
    for status in ("pending", "failed"):
        page = (await http.get("/v1/deliveries", params={"status": status, "limit": 1})).json()
        if page["data"]:
            return False
    return True


async def _scenario(
    servers: list[httpx.AsyncClient], start_workers: Callable[[], list[UstunProcess]], run: Run
) -> None:
    """Endpoints; half the payments, so that every worker starts with a backlog to share; the
    other half while the workers run and one is killed. Then wait until every receiver has
    every event and the database has nothing left to send."""
    # The rate-limited endpoint's receiver stamps arrivals on a loop of its own thread.
    run.receivers = {"slow": Receiver(), "capped": Receiver(), "rated": ThreadedReceiver()}
    run.receivers |= {f"normal-{n}": Receiver() for n in range(NORMAL_ENDPOINTS)}
    fifo = Receiver()
    run.receivers["slow"].script["/hook"] = replies(sleep(SLOW))
    run.receivers["capped"].script["/hook"] = replies(sleep(CAPPED_ANSWER))
    for receiver in [*run.receivers.values(), fifo]:
        await receiver.start()
    first, second = servers
    for n, (role, receiver) in enumerate(run.receivers.items()):
        options = {"capped": {"max_in_flight": MAX_IN_FLIGHT}, "rated": {"rate_limit": RATE_LIMIT}}
        answer = await _endpoint(servers[n % 2], receiver, **options.get(role, {}))
        assert answer.status_code == 201, answer.text
    answer = await _endpoint(second, fifo, ordering="fifo")
    run.fifo_answer = (answer.status_code, answer.json())
    if answer.status_code == 201:
        run.receivers["fifo"] = fifo

    half = PAYMENTS // 2
    await _create_payments(servers, run, range(half))
    workers = start_workers()
    creating = asyncio.create_task(_create_payments(servers, run, range(half, PAYMENTS)))
    expected = PAYMENTS * len(run.receivers)

    async def busy() -> bool:
        assert all(w.alive() for w in workers), [w.output() for w in workers]
        return sum(len(r.received) for r in run.receivers.values()) >= expected * KILL_AFTER

    await until(busy, within=60, what="the receivers to get a quarter of the deliveries")
    run.killed_at = time.monotonic()
    run.killed_ports = await _kill(workers[0])
    run.killed_status = workers[0].proc.returncode if workers[0].proc else None
    await creating

    async def complete() -> bool:
        return all(set(run.payments) <= _paid(r) for r in run.receivers.values())

    await until(complete, within=90, what="every receiver to get every payment's event")
    await until(lambda: _settled(first), within=30, what="every delivery to be settled")
    run.events = await _all_events(first)
    for receiver in [*run.receivers.values(), fifo]:
        await receiver.stop()


def local_ports(pid: int) -> set[int]:
    """The local TCP ports of `pid`'s sockets (Linux /proc): the requests it sent came from them."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target.removeprefix("socket:[").removesuffix("]"))
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _stop_and_list(pid: int) -> set[int]:
    """SIGSTOP `pid` and list its connections' local ports, now final."""
    os.kill(pid, signal.SIGSTOP)
    return local_ports(pid)


async def _kill(worker: UstunProcess) -> set[int]:
    """SIGKILL `worker`, stopped first so that its connections can be listed while they are
    final; return their local ports.

    The listing runs in another process and the wait in a thread: the receivers share this
    event loop, and arrivals held up while it parsed /proc/net/tcp (holding the GIL) would be
    stamped late, in a bunch, as if they had been sent so.
    """
    assert worker.proc is not None
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        loop = asyncio.get_running_loop()
        ports = await loop.run_in_executor(pool, _stop_and_list, worker.proc.pid)
    await asyncio.to_thread(worker.kill)
    return ports


def _paid(receiver: Receiver) -> set[str]:
    """The payment ids whose event `receiver` got."""
    return set(_paid_in_order(receiver))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The whole scenario, once: its record, for the tests below to judge."""
    tmp = tmp_path_factory.mktemp("scale")
    name, url = make_pg_database()
    processes: list[UstunProcess] = []
    try:
        first = Server(url, tmp / "serve-1.log", "--no-worker", **ENV).start()
        processes.append(first)
        key = wait_for(lambda: FIRST_KEY.search(first.output()), what="the first API key").group()
        second = Server(url, tmp / "serve-2.log", "--no-worker", "--no-migrate", **ENV).start()
        processes.append(second)
        env = {"USTUN_DATABASE_URL": url, **ENV}

        def start_workers() -> list[UstunProcess]:
            workers = [
                UstunProcess(["worker"], env, tmp / f"worker-{n}.log").start()
                for n in range(WORKERS)
            ]
            processes.extend(workers)
            return workers

        record = Run()

        async def scenario() -> None:
            auth = {"authorization": f"Bearer {key}"}
            async with (
                httpx.AsyncClient(base_url=first.base_url, headers=auth, timeout=30) as one,
                httpx.AsyncClient(base_url=second.base_url, headers=auth, timeout=30) as two,
            ):
                await _scenario([one, two], start_workers, record)

        asyncio.run(scenario())
        yield record
    finally:
        for process in reversed(processes):
            if process.alive():
                process.stop()
        drop_pg_database(name)


def test_every_event_reaches_every_endpoint(run: Run) -> None:
    assert len(run.payments) == PAYMENTS
    assert sorted(run.events.values()) == sorted(run.payments), "one event per payment"
    for role, receiver in run.receivers.items():
        missing = set(run.events) - set(event_ids(receiver))
        assert not missing, f"{role} never got {len(missing)} events"


def test_duplicates_only_where_the_kill_forced_them(run: Run) -> None:
    """A repeat is allowed only when the killed worker sent the first copy (its response, or
    the record of it, died with the worker)."""
    assert run.killed_status == -9
    after = sum(1 for r in run.receivers.values() for got in r.received if got.at > run.killed_at)
    assert after > 0, "the worker was killed after the run, not during it"
    for role, receiver in run.receivers.items():
        first: dict[str, Received] = {}
        for event_id, got in zip(event_ids(receiver), receiver.received, strict=True):
            first.setdefault(event_id, got)
        repeated = [e for e, n in Counter(event_ids(receiver)).items() if n > 1]
        unforced = [e for e in repeated if first[e].peer_port not in run.killed_ports]
        assert not unforced, f"{role}: {len(unforced)} repeats not sent first by the killed worker"


def busiest_second(arrivals: list[float]) -> int:
    """The most arrivals in any window [t, t + 1 s] that starts at an arrival."""
    times = sorted(arrivals)
    most, start = 0, 0
    for end, at in enumerate(times):
        while times[start] < at - 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def test_max_in_flight_holds_across_workers(run: Run) -> None:
    seen = run.receivers["capped"].most_in_flight
    assert seen <= MAX_IN_FLIGHT, f"capped endpoint saw {seen} concurrent requests"


def test_rate_limit_holds_across_workers(run: Run) -> None:
    seen = busiest_second([got.at for got in run.receivers["rated"].received])
    assert seen <= RATE_LIMIT + RATE_TOLERANCE, f"rate-limited endpoint got {seen} in 1 s"


def test_fifo_endpoint_receives_in_commit_order(run: Run) -> None:
    status, body = run.fifo_answer
    assert (status, body.get("ordering")) == (201, "fifo"), body
    receiver = run.receivers["fifo"]
    assert receiver.most_in_flight == 1
    order = list(dict.fromkeys(_paid_in_order(receiver)))
    sent = [run.payments[p] for p in order]
    inversions = [
        (a.payment_id, b.payment_id)
        for i, a in enumerate(sent)
        for b in sent[i + 1 :]
        if b.answered < a.sent  # b committed before a was even sent, yet arrived after it
    ]
    assert not inversions, f"{len(inversions)} pairs out of commit order, e.g. {inversions[:3]}"


def _paid_in_order(receiver: Receiver) -> list[str]:
    """The payment ids of `receiver`'s requests, in arrival order (duplicates kept)."""
    return [json.loads(body)["data"]["id"] for body in receiver.bodies()]
