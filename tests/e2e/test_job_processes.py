"""Jobs across real processes: reports through `ustun serve`, kill -9 of a worker, two workers."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import insert

from support import Server, UstunProcess, migrate_database, wait_for
from ustun import ids, jobs
from ustun.service.accounts import account_for_key, create_key
from ustun.service.tables import payments
from ustun.store import Database

pytestmark = pytest.mark.e2e
TESTS = str(Path(__file__).resolve().parent.parent)
WORKER_ENV = {
    "USTUN_JOB_LEASE": "2",
    "USTUN_JOB_POLL_INTERVAL": "0.2",
    "USTUN_JOB_MODULES": "job_kinds",
    # The test kinds, then the tree under test.
    "PYTHONPATH": os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])),
}


def _on(url: str, work: Any) -> Any:
    async def run() -> Any:
        db = Database(url)
        try:
            return await work(db)
        finally:
            await db.dispose()

    return asyncio.run(run())


def _account(url: str) -> tuple[str, str]:
    """Migrate the database and make an account; return its key and id."""
    migrate_database(url)

    async def make(db: Database) -> tuple[str, str]:
        key = await create_key(db, "e2e")
        account = await account_for_key(db, key)
        assert account is not None
        return key, account.id

    result: tuple[str, str] = _on(url, make)
    return result


def _worker(url: str, log: Path, *args: str) -> UstunProcess:
    return UstunProcess(["worker", *args], {"USTUN_DATABASE_URL": url, **WORKER_ENV}, log).start()


def _job(url: str, job_id: str, account_id: str) -> jobs.Job:
    async def read(db: Database) -> jobs.Job | None:
        return await jobs.get(db, job_id, account_id=account_id)

    job: jobs.Job = _on(url, read)
    return job


def test_report_end_to_end_through_ustun_serve(empty_database_url: str, tmp_path: Path) -> None:
    key, account_id = _account(empty_database_url)
    made = [
        (datetime(2026, 3, 2, 10, 0, tzinfo=UTC), 1_250, "EUR"),
        (datetime(2026, 3, 9, 11, 0, tzinfo=UTC), 4_000, "GBP"),
        (datetime(2026, 3, 31, 23, 0, tzinfo=UTC), 750, "EUR"),
        (datetime(2026, 4, 1, 0, 0, tzinfo=UTC), 99, "EUR"),
    ]

    async def add(db: Database) -> list[str]:
        payment_ids = []
        async with db.unit_of_work() as uow:
            for created_at, amount, currency in made:
                payment_ids.append(ids.new_id("pay"))
                await uow.conn.execute(
                    insert(payments).values(
                        id=payment_ids[-1],
                        account_id=account_id,
                        amount=amount,
                        currency=currency,
                        status="succeeded",
                        version=1,
                        created_at=created_at,
                        updated_at=created_at,
                    )
                )
        return payment_ids

    payment_ids = _on(empty_database_url, add)
    server = Server(empty_database_url, tmp_path / "serve.log").start()
    try:
        http = httpx.Client(base_url=server.base_url, headers={"authorization": f"Bearer {key}"})
        started = http.post("/v1/reports", json={"period": "2026-03", "format": "csv"})
        assert started.status_code == 202, started.text
        location = started.headers["location"]
        polls = 0
        while True:
            job = http.get(location)
            assert job.status_code == 200
            if job.json()["status"] == "done":
                assert "retry-after" not in job.headers
                break
            assert job.json()["status"] in ("pending", "processing")
            polls += 1
            assert polls < 30, job.json()
            time.sleep(int(job.headers["retry-after"]))
        got = http.get(job.json()["result_url"])
        assert got.status_code == 200
        assert got.headers["content-type"] == "text/csv; charset=utf-8"
        rows = list(csv.DictReader(io.StringIO(got.text)))
        assert [r["id"] for r in rows if r["id"] != "total"] == payment_ids[:3]
        assert {r["currency"]: int(r["amount"]) for r in rows if r["id"] == "total"} == {
            "EUR": 2_000,
            "GBP": 4_000,
        }
    finally:
        server.stop()


def _runs(log: Path) -> list[tuple[str, str, int, int]]:
    """`(what, job id, pid, attempt)` for every line the `slow` jobs wrote."""
    if not log.exists():
        return []
    return [
        (what, job_id, int(pid), int(attempt))
        for what, job_id, pid, attempt, _ in (line.split() for line in log.read_text().splitlines())
    ]


def _sse(text: str) -> list[tuple[int, str, dict[str, Any]]]:
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "id" in fields:
            events.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))
    return events


def test_kill_9_during_a_job_it_is_reclaimed_and_finishes_once(
    empty_database_url: str, tmp_path: Path
) -> None:
    key, account_id = _account(empty_database_url)
    runs = tmp_path / "runs.log"
    server = Server(empty_database_url, tmp_path / "serve.log", "--no-worker").start()
    first = _worker(empty_database_url, tmp_path / "worker1.log")
    second = None
    try:

        async def add(db: Database) -> jobs.Job:
            payload = {"seconds": 3, "log": str(runs)}
            return await jobs.enqueue(db, "slow", payload, account_id=account_id)

        job: jobs.Job = _on(empty_database_url, add)
        http = httpx.Client(base_url=server.base_url, headers={"authorization": f"Bearer {key}"})
        wait_for(
            lambda: http.get(f"/v1/jobs/{job.id}").json()["progress"] > 0,
            what="the first worker to make progress",
        )
        first.kill()
        assert http.get(f"/v1/jobs/{job.id}").json()["status"] == "processing"
        second = _worker(empty_database_url, tmp_path / "worker2.log")

        # The API process streams what the worker processes write, to the end.
        with http.stream("GET", f"/v1/jobs/{job.id}/events", timeout=60) as stream:
            assert stream.status_code == 200
            events = _sse(stream.read().decode())
        statuses = [data["status"] for _, kind, data in events if kind == "status"]
        assert statuses == ["pending", "processing", "pending", "processing", "done"]
        ids_seen = [event_id for event_id, _, _ in events]
        assert ids_seen == sorted(set(ids_seen))

        done = _job(empty_database_url, job.id, account_id)
        assert (done.status, done.attempts, done.progress) == ("done", 2, 100)
        lines = _runs(runs)
        assert [(what, attempt) for what, _, _, attempt in lines] == [
            ("start", 1),
            ("start", 2),
            ("end", 2),
        ]
        assert first.proc is not None
        assert second.proc is not None
        assert (lines[0][2], lines[2][2]) == (first.proc.pid, second.proc.pid)
    finally:
        for proc in (first, second):
            if proc is not None:
                proc.kill()
        server.stop()


@pytest.mark.parametrize("empty_database_url", ["postgresql"], indirect=True)
def test_two_workers_on_postgresql_never_run_the_same_job(
    empty_database_url: str, tmp_path: Path
) -> None:
    _, account_id = _account(empty_database_url)
    runs = tmp_path / "runs.log"
    workers = [
        _worker(empty_database_url, tmp_path / f"worker{i}.log", "--concurrency", "4")
        for i in range(2)
    ]
    try:

        async def add(db: Database) -> list[str]:
            payload = {"seconds": 0.2, "log": str(runs)}
            return [
                (await jobs.enqueue(db, "slow", payload, account_id=account_id)).id
                for _ in range(40)
            ]

        made: list[str] = _on(empty_database_url, add)
        wait_for(
            lambda: sum(what == "end" for what, *_ in _runs(runs)) == len(made),
            timeout=60,
            what="every job to end",
        )
    finally:
        for worker in workers:
            worker.stop()
    lines = _runs(runs)
    starts = Counter(job_id for what, job_id, _, _ in lines if what == "start")
    assert starts == dict.fromkeys(made, 1)
    assert {pid for *_, pid, _ in lines} == {w.proc.pid for w in workers if w.proc}
    assert {_job(empty_database_url, job_id, account_id).status for job_id in made} == {"done"}
