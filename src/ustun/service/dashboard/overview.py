"""The overview's figures for one account, each from the module that owns its table."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.service.tables import payments


@dataclass(slots=True)
class Overview:
    """Counts by status per resource, and the queue lag, of one account."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    lag_seconds: dict[str, float] = field(default_factory=dict)


async def _by_status(conn: AsyncConnection, account_id: str) -> dict[str, int]:
    rows = await conn.execute(
        select(payments.c.status, func.count())
        .where(payments.c.account_id == account_id)
        .group_by(payments.c.status)
    )
    return {row[0]: row[1] for row in rows}


async def overview(conn: AsyncConnection, account_id: str) -> Overview:
    """Everything the overview page shows, for `account_id` only."""
    result = Overview()
    result.counts["payments"] = await _by_status(conn, account_id)
    return result
