"""What an enqueue writes is a plan written once: run on the async engine's unit of work or on
a synchronous DB-API connection (sqlite3, psycopg 3), on SQLite and PostgreSQL, it leaves the
same job rows and keeps the same per-account pending-jobs quota."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from sqlalchemy import insert, select

from support import sync_connection
from ustun import clock, ids, jobs
from ustun.jobs.adapters import plans
from ustun.jobs.tables import jobs as jobs_table
from ustun.store import Database
from ustun.store.plans import run, run_sync
from ustun.store.tables import accounts


async def _account(db: Database) -> str:
    account = ids.new_id("acct")
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            insert(accounts).values(id=account, name=account, created_at=clock.now())
        )
    return account


def _job(account: str) -> jobs.Job:
    later = clock.now() + timedelta(minutes=5)
    return jobs.new_job("plan", {"n": 1, "why": "100%"}, account_id=account, run_at=later)


async def _row(db: Database, job: jobs.Job) -> dict[str, Any]:
    async with db.read() as conn:
        row = (await conn.execute(select(jobs_table).where(jobs_table.c.id == job.id))).one()
    return dict(row._mapping)


async def test_the_enqueue_plan_leaves_the_same_row_on_either_kind_of_connection(
    db: Database, database_url: str
) -> None:
    account = await _account(db)
    on_async = _job(account)
    on_sync = replace(on_async, id=ids.new_id("job"))
    async with db.unit_of_work() as uow:
        assert await run(plans.enqueue(on_async, max_pending=10), uow.conn)
    with sync_connection(database_url) as conn:
        assert run_sync(plans.enqueue(on_sync, max_pending=10), conn)
    written = [await _row(db, job) for job in (on_async, on_sync)]
    assert [row.pop("id") for row in written] == [on_async.id, on_sync.id]
    assert written[0] == written[1]
    assert [await jobs.get(db, job.id, account_id=account) for job in (on_async, on_sync)] == [
        on_async,
        on_sync,
    ]


async def test_the_quota_counts_what_either_kind_of_connection_wrote(
    db: Database, database_url: str
) -> None:
    account = await _account(db)
    async with db.unit_of_work() as uow:
        assert await run(plans.enqueue(_job(account), max_pending=2), uow.conn)
    with sync_connection(database_url) as conn:
        assert run_sync(plans.enqueue(_job(account), max_pending=2), conn)
        assert not run_sync(plans.enqueue(_job(account), max_pending=2), conn)
    async with db.unit_of_work() as uow:
        assert not await run(plans.enqueue(_job(account), max_pending=2), uow.conn)
        assert await run(plans.enqueue(_job(account), max_pending=3), uow.conn)
    listed = await jobs.page(db, account, status="pending", limit=10, cursor=None)
    assert len(listed.jobs) == 3
