"""Queue health read from the database: how much is due and how long the oldest has waited.

The same figures feed `/metrics` (all accounts: the stall alarm) and the dashboard overview
(one account). An item is due when its status is a claimable one and its time has come; a
worker that claims it moves that time to the end of its lease, so an item that stays due keeps
ageing only while no worker takes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Column, ColumnElement, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import clock, jobs
from ustun.jobs.tables import jobs as jobs_table
from ustun.jobs.tables import queue_of
from ustun.service.plumbing.metrics import QueueStat
from ustun.webhooks.states import DUE
from ustun.webhooks.tables import deliveries


async def due_stat(
    conn: AsyncConnection,
    queue: str,
    due_at: Column[Any],
    where: Sequence[ColumnElement[bool]],
    now: datetime | None = None,
) -> QueueStat:
    """Depth and oldest-due age of the rows matching `where` whose `due_at` has passed."""
    now = now or clock.now()
    depth, oldest = (
        await conn.execute(select(func.count(), func.min(due_at)).where(*where, due_at <= now))
    ).one()
    age = max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0
    return QueueStat(queue, depth, age)


def _deliveries_due(account_id: str | None) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = [deliveries.c.status.in_([s.value for s in DUE])]
    if account_id is not None:
        where.append(deliveries.c.account_id == account_id)
    return where


async def webhook_deliveries(
    conn: AsyncConnection, account_id: str | None = None
) -> list[QueueStat]:
    """The webhook delivery queue, of one account or of all."""
    return [
        await due_stat(
            conn, "webhook_deliveries", deliveries.c.next_attempt_at, _deliveries_due(account_id)
        )
    ]


async def job_queue(conn: AsyncConnection, account_id: str | None = None) -> list[QueueStat]:
    """Pending jobs whose run time has come, of one account (read from its own part of the
    pending jobs' index, never another account's backlog) or of all."""
    where: list[ColumnElement[bool]] = [jobs_table.c.status == jobs.PENDING]
    if account_id is not None:
        where.append(queue_of(jobs_table) == account_id)
    return [await due_stat(conn, "jobs", jobs_table.c.run_at, where)]


async def all_queues(conn: AsyncConnection) -> list[QueueStat]:
    """Every queue of the service, across accounts (a `/metrics` probe)."""
    return [*await webhook_deliveries(conn), *await job_queue(conn)]


async def jobs_by_status(conn: AsyncConnection) -> dict[str, int]:
    """How many jobs are in each status, across accounts (a `/metrics` probe)."""
    rows = await conn.execute(
        select(jobs_table.c.status, func.count()).group_by(jobs_table.c.status)
    )
    counted = {row[0]: row[1] for row in rows}
    return {status: counted.get(status, 0) for status in jobs.STATUSES}
