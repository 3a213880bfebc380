"""The overview's figures for one account: counts by status, dead letters and queue lag."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.jobs.adapters import store_for
from ustun.service.operations import queues
from ustun.service.resources.schema import payments
from ustun.store import Database
from ustun.webhooks.adapters import for_connection


@dataclass(slots=True)
class Overview:
    """Counts by status per resource, and the queue lag, of one account."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    lag_seconds: dict[str, float] = field(default_factory=dict)


async def payments_by_status(conn: AsyncConnection, account_id: str) -> dict[str, int]:
    """How many of the account's payments are in each status."""
    status = payments.c.status
    rows = await conn.execute(
        select(status, func.count())
        .where(payments.c.account_id == account_id)
        .group_by(status)
        .order_by(status)
    )
    return {row[0]: row[1] for row in rows}


async def overview(db: Database, conn: AsyncConnection, account_id: str) -> Overview:
    """Everything the overview page shows, for `account_id` only (the jobs' figures through
    the jobs store of `db`, the webhooks' through theirs on `conn`, the payments on `conn`)."""
    result = Overview()
    webhooks = for_connection(conn)
    result.counts["events"] = await webhooks.events_by_type(conn, account_id)
    result.counts["deliveries"] = await webhooks.deliveries_by_status(conn, account_id)
    result.counts["jobs"] = await store_for(db).count_by_status(db, account_id)
    result.counts["payments"] = await payments_by_status(conn, account_id)
    lagging = [
        *await queues.webhook_deliveries(conn, account_id),
        *await queues.job_queue(db, account_id),
    ]
    for stat in lagging:
        result.lag_seconds[stat.queue.replace("_", " ")] = stat.oldest_due_age
    return result
