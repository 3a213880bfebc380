"""Queue health read from the database: how much is due and how long the oldest has waited.

The same figures feed `/metrics` (all accounts: the stall alarm) and the dashboard overview
(one account). An item is due when its status is a claimable one and its time has come; a
worker that claims it moves that time to the end of its lease, so an item that stays due keeps
ageing only while no worker takes it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import clock, jobs
from ustun.jobs.adapters import store_for
from ustun.service.plumbing.metrics import CountProbe, QueueProbe, QueueStat
from ustun.store import Database
from ustun.webhooks.adapters import for_connection


def _stat(queue: str, depth: int, oldest: datetime | None, now: datetime) -> QueueStat:
    age = max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0
    return QueueStat(queue, depth, age)


async def webhook_deliveries(
    conn: AsyncConnection, account_id: str | None = None
) -> list[QueueStat]:
    """The webhook delivery queue, of one account or of all."""
    now = clock.now()
    depth, oldest = await for_connection(conn).due_deliveries(conn, account_id, now)
    return [_stat("webhook_deliveries", depth, oldest, now)]


async def job_queue(db: Database, account_id: str | None = None) -> list[QueueStat]:
    """Pending jobs whose run time has come, of one account or of all (the jobs store's
    backlog)."""
    now = clock.now()
    backlog = await store_for(db).backlog(db, account_id)
    return [_stat("jobs", backlog.depth, backlog.oldest_due, now)]


async def jobs_by_status(db: Database) -> dict[str, int]:
    """How many jobs are in each status, across accounts (a `/metrics` probe)."""
    counted = await store_for(db).count_by_status(db)
    return {status: counted.get(status, 0) for status in jobs.STATUSES}


def queue_probe(db: Database) -> QueueProbe:
    """The `/metrics` probe of every queue of the service, across accounts: the webhook
    deliveries read in the scrape's snapshot, the jobs through their store."""

    async def probe(conn: AsyncConnection) -> list[QueueStat]:
        return [*await webhook_deliveries(conn), *await job_queue(db)]

    return probe


def job_probe(db: Database) -> CountProbe:
    """The `/metrics` probe of the jobs by status, across accounts."""

    async def probe(_conn: AsyncConnection) -> dict[str, int]:
        return await jobs_by_status(db)

    return probe
