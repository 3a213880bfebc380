"""Idempotency against a real `ustun serve`: a storm of duplicates, and a crash mid-transfer."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from support import USTUN, Server, wait_for
from ustun.idempotency.tables import idempotency_records
from ustun.service.tables import ledger_accounts, transfers
from ustun.store import Database

pytestmark = pytest.mark.e2e
KEY = re.compile(r"ustun_sk_[A-Za-z0-9_-]{43}")
PAYMENT = {"amount": 4200, "currency": "EUR", "order_id": 7}
CRASH_KEY = "crash-transfer-1"
# `ustun serve` whose transfers hold between their debit and their credit.
PAUSED_SERVE = Path(__file__).parent.parent / "paused_serve.py"


def first_key(server: Server) -> str:
    return wait_for(lambda: KEY.search(server.output()), what="the first API key").group()


def new_key(database_url: str, account: str) -> str:
    made = subprocess.run(
        [USTUN, "keys", "create", "--account", account],
        env={"USTUN_DATABASE_URL": database_url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return made.stdout.strip()


async def storm(base: str, api_key: str, idem_key: str, n: int) -> list[httpx.Response]:
    headers = {"authorization": f"Bearer {api_key}", "idempotency-key": idem_key}
    limits = httpx.Limits(max_connections=n)
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=60) as http:
        return await asyncio.gather(*(http.post("/v1/payments", json=PAYMENT) for _ in range(n)))


def test_64_concurrent_duplicates_make_one_payment(empty_database_url: str, tmp_path: Path) -> None:
    server = Server(empty_database_url, tmp_path / "serve.log").start()
    try:
        api_key = first_key(server)
        idem = str(uuid.uuid4())
        answers = asyncio.run(storm(server.base_url, api_key, idem, 64))
        statuses = sorted({r.status_code for r in answers})
        assert set(statuses) <= {201, 409}, [
            r.text for r in answers if r.status_code not in (201, 409)
        ]
        created = [r for r in answers if r.status_code == 201]
        originals = [r for r in created if "idempotent-replayed" not in r.headers]
        assert len(originals) == 1
        original = originals[0]
        for busy in (r for r in answers if r.status_code == 409):
            assert busy.json()["type"].endswith("/problems/idempotency-in-progress")
            assert busy.headers["retry-after"].isdigit()
        for replay in created:
            assert replay.content == original.content
            assert replay.headers["location"] == original.headers["location"]

        auth = {"authorization": f"Bearer {api_key}"}
        listed = httpx.get(f"{server.base_url}/v1/payments", headers=auth).json()["data"]
        assert [p["id"] for p in listed] == [original.json()["id"]]

        later = httpx.post(
            f"{server.base_url}/v1/payments",
            json=PAYMENT,
            headers={**auth, "idempotency-key": idem},
        )
        assert later.status_code == 201
        assert later.content == original.content
        assert later.headers["location"] == original.headers["location"]
        assert later.headers["idempotent-replayed"] == "true"

        reused = httpx.post(
            f"{server.base_url}/v1/payments",
            json={**PAYMENT, "amount": 1},
            headers={**auth, "idempotency-key": idem},
        )
        assert reused.status_code == 422
        assert reused.json()["type"].endswith("/problems/idempotency-key-reused")

        other = {"authorization": f"Bearer {new_key(empty_database_url, 'other')}"}
        theirs = httpx.post(
            f"{server.base_url}/v1/payments",
            json=PAYMENT,
            headers={**other, "idempotency-key": idem},
        )
        assert theirs.status_code == 201
        assert "idempotent-replayed" not in theirs.headers
        assert theirs.json()["id"] != original.json()["id"]
        assert len(httpx.get(f"{server.base_url}/v1/payments", headers=auth).json()["data"]) == 1
    finally:
        server.stop()


async def snapshot(database_url: str) -> tuple[int, list[int], list[str]]:
    """Transfers made, ledger balances (oldest account first), idempotency record states."""
    db = Database(database_url)
    try:
        async with db.read() as conn:
            made = await conn.scalar(select(func.count()).select_from(transfers))
            balances = await conn.scalars(
                select(ledger_accounts.c.balance).order_by(ledger_accounts.c.id)
            )
            states = await conn.scalars(
                select(idempotency_records.c.state).where(idempotency_records.c.key == CRASH_KEY)
            )
            return int(made or 0), list(balances), list(states)
    finally:
        await db.dispose()


def test_kill_9_mid_transfer_then_retry_applies_it_exactly_once(
    empty_database_url: str, tmp_path: Path
) -> None:
    lease = {"USTUN_IDEMPOTENCY_LEASE": "2"}
    signal_file = tmp_path / "holding-claim"
    crashing = Server(
        empty_database_url,
        tmp_path / "serve1.log",
        program=[sys.executable, str(PAUSED_SERVE), str(signal_file)],
        **lease,
    ).start()
    api_key = first_key(crashing)
    auth = {"authorization": f"Bearer {api_key}"}
    base = crashing.base_url

    def open_account(balance: int) -> str:
        made = httpx.post(
            f"{base}/v1/ledger-accounts", json={"currency": "EUR", "balance": balance}, headers=auth
        )
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    a, b = open_account(100), open_account(50)
    move = {"from": a, "to": b, "amount": 30, "currency": "EUR"}
    keyed = {**auth, "idempotency-key": CRASH_KEY}
    with ThreadPoolExecutor(1) as pool:
        # The doomed request: its server dies under it, so it ends in a transport error.
        doomed = pool.submit(httpx.post, f"{base}/v1/transfers", json=move, headers=keyed)
        try:
            wait_for(signal_file.exists, what="the transfer to hold its claim, mid-write")
        finally:
            crashing.kill()
        with pytest.raises(httpx.TransportError):
            doomed.result(30)
    # Nothing of the transfer survived, its claim included: on both databases the claim is
    # part of the transaction that died (on PostgreSQL held by a transaction-scoped advisory
    # lock, which the dead session released).
    assert asyncio.run(snapshot(empty_database_url)) == (0, [100, 50], [])

    server = Server(empty_database_url, tmp_path / "serve2.log", **lease).start()
    try:
        base = server.base_url

        def retry() -> httpx.Response | None:
            answer = httpx.post(f"{base}/v1/transfers", json=move, headers=keyed)
            if answer.status_code == 409:
                assert answer.json()["type"].endswith("/problems/idempotency-in-progress")
                return None
            return answer

        done = wait_for(retry, timeout=30, interval=0.2, what="the retry to take the claim over")
        assert done.status_code == 201, done.text
        again = httpx.post(f"{base}/v1/transfers", json=move, headers=keyed)
        assert again.content == done.content
        balances = [
            httpx.get(f"{base}/v1/ledger-accounts/{x}", headers=auth).json()["balance"]
            for x in (a, b)
        ]
        assert balances == [70, 80]
        assert asyncio.run(snapshot(empty_database_url)) == (1, [70, 80], ["completed"])
    finally:
        server.stop()
