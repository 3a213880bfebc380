"""The dashboard's job-queue probe of one account reads that account's pending jobs only."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import insert, text

from ustun import clock, ids, jobs
from ustun.service.operations import queues
from ustun.store import Database
from ustun.store.tables import accounts


@pytest.fixture
async def own_pg(own_postgresql_url: str) -> AsyncIterator[Database]:
    """A `Database` on a PostgreSQL database of this test's own."""
    database = Database(own_postgresql_url)
    yield database
    await database.dispose()


async def test_an_accounts_probe_never_reads_another_accounts_backlog(own_pg: Database) -> None:
    a, b = ids.new_id("acc"), ids.new_id("acc")
    async with own_pg.unit_of_work() as uow:
        await uow.conn.execute(
            insert(accounts),
            [{"id": i, "name": i, "created_at": clock.now()} for i in (a, b)],
        )
    async with own_pg.unit_of_work():
        for _ in range(3_000):
            await jobs.enqueue(own_pg, "quick", account_id=b)
    await jobs.enqueue(own_pg, "quick", account_id=a)
    async with own_pg.unit_of_work() as uow:  # the probe reads in it: one transaction's figures
        (stat,) = await queues.job_queue(own_pg, a)
        # The rows this transaction has fetched from `jobs` so far.
        fetched = await uow.conn.scalar(
            text(
                "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)"
                " FROM pg_stat_xact_user_tables WHERE relname = 'jobs'"
            )
        )
    assert stat.depth == 1
    assert fetched is not None
    assert fetched <= 1
