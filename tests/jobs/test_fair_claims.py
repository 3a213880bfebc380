"""Fair claims on SQLite and PostgreSQL: accounts take turns, so one account's backlog never
holds up another's jobs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, insert, select

from job_kinds import eventually
from support import in_background
from ustun import clock, ids, jobs
from ustun.jobs.adapters import store_for
from ustun.jobs.adapters.postgres import CLAIM
from ustun.jobs.tables import jobs as jobs_table
from ustun.store import Database
from ustun.store.tables import accounts

# How long each of the flood's jobs takes: 3,000 of them keep four slots busy for 7.5 s.
QUICK = 0.01
FLOOD = 3_000

kinds = jobs.Registry()


@kinds.kind("quick")
async def quick(ctx: jobs.JobContext) -> None:
    """A short report: a few milliseconds of waiting on I/O."""
    await asyncio.sleep(QUICK)


@pytest.fixture
async def own_db(own_database_url: str) -> AsyncIterator[Database]:
    """A `Database` whose tables hold only this test's rows."""
    database = Database(own_database_url)
    yield database
    await database.dispose()


async def _accounts(db: Database, *names: str) -> list[str]:
    made = [ids.new_id("acc") for _ in names]
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            insert(accounts),
            [
                {"id": account, "name": name, "created_at": clock.now()}
                for account, name in zip(made, names, strict=True)
            ],
        )
    return made


async def _pending(db: Database, account_id: str) -> int:
    async with db.read() as conn:
        count = await conn.scalar(
            select(func.count()).where(
                jobs_table.c.account_id == account_id, jobs_table.c.status == jobs.PENDING
            )
        )
    return int(count or 0)


async def test_one_accounts_flood_does_not_delay_anothers_job(own_db: Database) -> None:
    a, b = await _accounts(own_db, "a", "b")
    async with own_db.unit_of_work():  # B's flood, written at commit in one statement
        for n in range(FLOOD):
            await jobs.enqueue(own_db, "quick", {"n": n}, account_id=b, kinds=kinds)
    runner = jobs.Runner(own_db, kinds=kinds, concurrency=4, poll_interval=0.1)
    async with in_background(runner):

        async def b_running() -> bool:
            return await _pending(own_db, b) < FLOOD - 20

        await eventually(b_running, what="the worker to work through B's jobs")
        start = time.monotonic()
        job = await jobs.enqueue(own_db, "quick", account_id=a, kinds=kinds)

        async def a_done() -> jobs.Job | None:
            current = await jobs.get(own_db, job.id, account_id=a)
            return current if current is not None and current.status == jobs.DONE else None

        await eventually(a_done, within=30, what="A's job to be done")
        waited = time.monotonic() - start
        left = await _pending(own_db, b)
    print(f"A's job done in {waited:.3f} s with {left} of B's jobs still queued")
    assert left > FLOOD // 2, "B's flood was still queued while A's job ran"
    assert waited < 1.0


async def test_a_claim_takes_each_accounts_oldest_due_job_in_turns(own_db: Database) -> None:
    a, b, c = await _accounts(own_db, "a", "b", "c")
    store = store_for(own_db)
    made: dict[str, list[str]] = {}
    for name, account in (("a", a), ("a", a), ("a", a), ("b", b), ("b", b), ("c", c)):
        job = await jobs.enqueue(own_db, "quick", account_id=account, kinds=kinds)
        made.setdefault(name, []).append(job.id)
    anonymous = await jobs.enqueue(own_db, "quick", kinds=kinds)  # no account: a queue too
    claimed = await store.claim(own_db, worker_id="wrk_a", kinds=["quick"], limit=5, lease=30)
    # The first turn (each queue's oldest), then the second turn's oldest.
    assert {j.id for j in claimed} == {
        made["a"][0],
        made["b"][0],
        made["c"][0],
        anonymous.id,
        made["a"][1],
    }
    rest = await store.claim(own_db, worker_id="wrk_b", kinds=["quick"], limit=5, lease=30)
    assert {j.id for j in rest} == {made["b"][1], made["a"][2]}


def _reads(plan: dict[str, Any]) -> Iterator[tuple[str, int]]:
    """Each node of a JSON plan that reads `jobs`: its type and the rows it read in all."""
    if plan.get("Relation Name") == "jobs":
        per_loop = plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)
        yield plan["Node Type"], per_loop * plan["Actual Loops"]
    for child in plan.get("Plans", []):
        yield from _reads(child)


async def test_a_claim_reads_the_head_of_each_queue_never_a_backlog(
    own_postgresql_url: str,
) -> None:
    db = Database(own_postgresql_url)
    try:
        a, b = await _accounts(db, "a", "b")
        async with db.unit_of_work():
            for _ in range(FLOOD):
                await jobs.enqueue(db, "quick", account_id=b, kinds=kinds)
        await jobs.enqueue(db, "quick", account_id=a, kinds=kinds)
        now, limit = clock.now(), 16
        params = {
            "now": now,
            "kinds": ["quick"],
            "limit": limit,
            "claimer": "wrk_x",
            "leased_until": now + timedelta(seconds=30),
        }
        async with db.autocommit() as conn:
            await conn.execute("ANALYZE jobs")
            for plans in ("auto", "force_generic_plan"):  # asyncpg's prepared statements
                claim = conn.transaction()
                await claim.start()
                await conn.execute(f"SET LOCAL plan_cache_mode = {plans}")
                sql, arguments = CLAIM.text(db.engine.dialect, params)
                explained = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *arguments)
                await claim.rollback()  # as if never claimed
                reads = list(_reads(explained[0]["Plan"]))  # the pool decodes JSON
                assert "Seq Scan" not in {node for node, _ in reads}
                # The queues' probes, each queue's head twice (its candidates, its share), the
                # batch by primary key and its update (67 rows): nowhere near B's 3,000.
                assert sum(rows for _, rows in reads) <= 6 * limit, reads
    finally:
        await db.dispose()
