"""The overview's figures for one account: counts by status, dead letters and queue lag."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Column, Table, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.jobs.adapters import store_for
from ustun.service.operations import queues
from ustun.service.resources.schema import payments
from ustun.store import Database
from ustun.webhooks.tables import deliveries, events


@dataclass(slots=True)
class Overview:
    """Counts by status per resource, and the queue lag, of one account."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    lag_seconds: dict[str, float] = field(default_factory=dict)


async def count_by(
    conn: AsyncConnection, table: Table, column: Column[Any], account_id: str
) -> dict[str, int]:
    """How many of the account's rows of `table` have each value of `column`."""
    rows = await conn.execute(
        select(column, func.count())
        .where(table.c.account_id == account_id)
        .group_by(column)
        .order_by(column)
    )
    return {row[0]: row[1] for row in rows}


async def overview(db: Database, conn: AsyncConnection, account_id: str) -> Overview:
    """Everything the overview page shows, for `account_id` only (the jobs' figures through
    the jobs store of `db`, the rest on `conn`)."""
    result = Overview()
    result.counts["events"] = await count_by(conn, events, events.c.type, account_id)
    result.counts["deliveries"] = await count_by(conn, deliveries, deliveries.c.status, account_id)
    result.counts["jobs"] = await store_for(db).count_by_status(db, account_id)
    result.counts["payments"] = await count_by(conn, payments, payments.c.status, account_id)
    lagging = [
        *await queues.webhook_deliveries(conn, account_id),
        *await queues.job_queue(db, account_id),
    ]
    for stat in lagging:
        result.lag_seconds[stat.queue.replace("_", " ")] = stat.oldest_due_age
    return result
