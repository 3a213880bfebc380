"""Wake-ups on PostgreSQL: enqueues NOTIFY only while a worker waits, and none is missed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from job_kinds import eventually, finished, running
from ustun import clock, jobs
from ustun.jobs import wakeup
from ustun.jobs.adapters.plans import INSERT
from ustun.jobs.adapters.postgres import CHANNEL, PostgresJobStore
from ustun.jobs.store import JobListener
from ustun.store import Database


@pytest.fixture
async def pg(own_postgresql_url: str) -> AsyncIterator[Database]:
    """A database of this test's own. Waiters are per database: in the shared one, a worker of
    another test (or the row of one whose backend was still exiting) makes enqueues NOTIFY."""
    database = Database(own_postgresql_url)
    yield database
    await database.dispose()


@pytest.fixture
async def listener(pg: Database) -> AsyncIterator[JobListener]:
    """A connected listener (not yet waiting)."""
    wake, stopping = asyncio.Event(), asyncio.Event()
    listening = PostgresJobStore().listener(pg, wake)
    assert listening is not None
    task = asyncio.create_task(listening.run(stopping))
    await asyncio.wait_for(wake.wait(), 10)  # set once it listens
    try:
        yield listening
    finally:
        stopping.set()
        await task


async def _notifications(pg: Database) -> tuple[asyncpg.Connection, list[Any]]:
    seen: list[Any] = []
    conn = await asyncpg.connect(pg.dsn)
    await conn.add_listener(CHANNEL, lambda *args: seen.append(args))
    return conn, seen


async def test_enqueues_notify_only_while_a_worker_waits(
    pg: Database, listener: JobListener
) -> None:
    kind = f"unclaimed-{uuid.uuid4().hex[:10]}"
    conn, seen = await _notifications(pg)
    try:
        await jobs.enqueue(pg, kind)
        await asyncio.sleep(0.3)
        assert seen == []
        assert await listener.idle()
        assert not await listener.idle()  # already waiting
        await jobs.enqueue(pg, kind)

        async def notified() -> bool:
            return len(seen) == 1

        await eventually(notified, what="a notification")
        await listener.busy()
        await jobs.enqueue(pg, kind)
        await asyncio.sleep(0.3)
        assert len(seen) == 1
    finally:
        await conn.close()


async def test_a_registration_commits_after_the_enqueues_that_could_miss_it(
    pg: Database, listener: JobListener
) -> None:
    now = clock.now()
    conn = await asyncpg.connect(pg.dsn)
    try:
        async with conn.transaction():
            row = {
                "id": f"job_{uuid.uuid4().hex}",
                "kind": "unclaimed",
                "payload": {},
                "max_attempts": 1,
                "run_at": now,
                "created_at": now,
            }
            sql, arguments = INSERT.text(pg.engine.dialect, row)
            await conn.execute(sql, *arguments)
            registering = asyncio.create_task(listener.idle())
            await asyncio.sleep(0.3)
            assert not registering.done()  # it waits for this enqueue to commit
        assert await asyncio.wait_for(registering, 10)
    finally:
        await conn.close()


async def test_an_idle_worker_is_woken_by_another_process_enqueue(
    pg: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    def elsewhere() -> None:
        """This process's runners hear nothing: as if another process enqueued."""

    monkeypatch.setattr(wakeup.doorbell, "ring", elsewhere)
    async with running(pg, poll_interval=60.0) as runner:

        async def waiting() -> bool:
            return runner._listener is not None and runner._listener.waiting

        await eventually(waiting, what="the worker to wait for a NOTIFY")
        job = await jobs.enqueue(pg, "noop")
        done = await finished(pg, job.id)
        assert done.status == "done"
        await eventually(waiting, what="the worker to wait again")


async def test_a_worker_that_claims_a_full_batch_stops_asking_for_notifications(
    pg: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    def elsewhere() -> None:
        """As if another process enqueued."""

    monkeypatch.setattr(wakeup.doorbell, "ring", elsewhere)
    async with running(pg, concurrency=2, poll_interval=60.0) as runner:

        async def waiting() -> bool:
            return runner._listener is not None and runner._listener.waiting

        async def busy() -> bool:
            return not await waiting() and len(runner._running) == 2

        await eventually(waiting, what="the worker to wait for a NOTIFY")
        async with pg.unit_of_work():
            made = [await jobs.enqueue(pg, "slow", {"seconds": 0.5}) for _ in range(2)]
        await eventually(busy, what="a full batch claimed, no NOTIFY asked for")
        for job in made:
            await finished(pg, job.id)
