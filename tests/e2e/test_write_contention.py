"""One account's 256 transfers queued on the same two ledger rows never hold every write
connection: another account's writes and reads keep their pace beside them, where they waited
behind the whole queue (p50 1.1-5.9 s on PostgreSQL, every request past 5 s on SQLite).

Asserted: A's p50 under 100 ms and p99 under 1 s beside B. On a quiet machine A's p99 beside B
stays under 100 ms too (66 ms on SQLite, 82 ms on PostgreSQL at load average 7), but on a
machine shared with other test runs A's p99 *alone* ranged from 25 ms to 1.5 s, so a 100 ms p99
would fail on the machine's noise, not on the server's; the figures are printed."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from support import FIRST_KEY, Server, run_ustun, wait_for
from webhook_support import until

pytestmark = pytest.mark.e2e

LOAD = str(Path(__file__).parents[1] / "contention_load.py")
CONTENDERS = 256
RATE = 20  # A's requests a second
SECONDS = 5.0


async def _paced(http: httpx.AsyncClient, seconds: float) -> list[tuple[int, float]]:
    """A's traffic: a payment created and read back, RATE requests a second; (status, s)."""
    timings: list[tuple[int, float]] = []

    async def create_and_read() -> None:
        began = time.perf_counter()
        created = await http.post(
            "/v1/payments",
            json={"amount": 100, "currency": "EUR"},
            headers={"idempotency-key": str(uuid.uuid4())},
        )
        timings.append((created.status_code, time.perf_counter() - began))
        began = time.perf_counter()
        read = await http.get(created.headers["location"])
        timings.append((read.status_code, time.perf_counter() - began))

    tasks = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        tasks.append(asyncio.create_task(create_and_read()))
        await asyncio.sleep(2 / RATE)
    await asyncio.gather(*tasks)
    return timings


def _p(timings: list[tuple[int, float]], q: int) -> float:
    return statistics.quantiles([s for _, s in timings], n=100)[q - 1] * 1000


async def test_another_accounts_requests_keep_their_pace_beside_a_pile_of_transfers(
    empty_database_url: str, tmp_path: Path
) -> None:
    # No request rate limit: what is measured is the write connections, which a limit on B's
    # requests a second would spare them by refusing most of B's transfers (429).
    server = Server(
        empty_database_url, tmp_path / "serve.log", "--no-worker", USTUN_RATE_LIMIT="0"
    ).start()
    try:
        key_a = wait_for(lambda: FIRST_KEY.search(server.output()), what="the key").group()
        made = run_ustun("keys", "create", "--account", "b", env=server.env)
        assert made.returncode == 0, made.stderr
        key_b = made.stdout.strip()
        async with (
            httpx.AsyncClient(
                base_url=server.base_url, headers={"authorization": f"Bearer {key_a}"}
            ) as a,
            # B's own reads wait behind its transfers, in its queue of requests in flight.
            httpx.AsyncClient(
                base_url=server.base_url,
                headers={"authorization": f"Bearer {key_b}"},
                timeout=60,
            ) as b,
        ):
            ledgers = [
                (
                    await b.post("/v1/ledger-accounts", json={"currency": "EUR", "balance": 10**9})
                ).json()["id"]
                for _ in range(2)
            ]
            alone = await _paced(a, 2.0)

            contention = await asyncio.create_subprocess_exec(
                sys.executable,
                LOAD,
                server.base_url,
                key_b,
                *ledgers,
                str(CONTENDERS),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            try:
                assert contention.stdout is not None
                assert (await contention.stdout.readline()).strip() == b"started"

                async def moving() -> bool:
                    balance = (await b.get(f"/v1/ledger-accounts/{ledgers[0]}")).json()
                    return bool(balance["balance"] != 10**9)

                await until(moving, within=30, what="B's transfers to move money")
                beside = await _paced(a, SECONDS)
            finally:
                out, _ = await asyncio.wait_for(contention.communicate(b""), 120)
        b_statuses = json.loads(out.decode().splitlines()[-1])
        print(
            f"A alone: p50 {_p(alone, 50):.1f} ms p99 {_p(alone, 99):.1f} ms; beside "
            f"{CONTENDERS} transfers of B: p50 {_p(beside, 50):.1f} ms "
            f"p99 {_p(beside, 99):.1f} ms (n={len(beside)}); B: {b_statuses}"
        )
        assert {status for status, _ in beside} <= {200, 201}
        assert set(b_statuses) == {"201"}, b_statuses
        assert _p(beside, 50) < 100
        assert _p(beside, 99) < 1000
    finally:
        server.stop()
